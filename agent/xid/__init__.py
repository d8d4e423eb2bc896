"""XIDs and sticky faults: the kernel log, the parser, the daemon's monitor, the sticky-fault
store and `clear`.
"""
