"""A virtme-ng guest on the host: the accelerator (accel), the vng command line (vng),
the running guest (machine),
its NVMe disks (disks), SSH port and process group (ports), qemu monitor (monitor)
and console (console).
"""
