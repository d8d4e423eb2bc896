"""The GPU Operator family: the `operator` policy section (policy.py), the operator-managed
driver and toolkit state the driver and toolkit checks share (state.py), and the
gpu-operator check (gpu_operator.py)."""
