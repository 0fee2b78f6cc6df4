"""What cases are made of: Direct I/O plans and verdicts (dio), the host side of the
I/O engine (engine), faults held in flight (faults), trial counts and outcomes (trials).
"""
