"""time-sync: the check (time_sync.py), its per-daemon verdicts (daemons.py) and parsers."""
