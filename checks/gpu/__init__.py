"""The GPU checks (one module per check) and what they share: common.py reads the snapshot
(docs/gpu-snapshot.md), policy.py holds the `gpu` policy section."""
