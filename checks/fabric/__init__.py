"""Multi-node NVLink: the IMEX report (imex.py) and its policy and config sections (policy.py)."""
