"""Inside a guest: SSH commands (ssh, one channel each: channel), the build loaded and its pools (zfs), evidence
of trouble (evidence), the judgement after each case (aftercase) and the guest
lifecycle the fixtures use (lifecycle).
"""
