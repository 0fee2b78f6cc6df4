"""ozfs-vmci: test OpenZFS patch series inside virtme-ng guests.

The package follows the pipeline a run goes through:

    source  -> series  -> build  -> vm  -> guest  -> cases -> report
    source.py  series.py  build.py  vm.py  guest.py  (cases/)  report.py

plus kernel.py (kernel profiles in vmimages/), accel.py (KVM probe and deadline
scaling), console.py and evidence.py (kernel trouble on the console; evidence of a
hang), aftercase.py (the guest judged after each case), and plugin/ (the pytest
plugin: options, fixtures, hooks).
"""
__version__ = "0.1.0"
