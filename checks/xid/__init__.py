"""gpu-xid: the check (gpu_xid.py), its helpers (eval.py) and the XID policy (policy.py)."""
