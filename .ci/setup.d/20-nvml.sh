#!/usr/bin/env bash
# The NVML tests (tests/nvml_sim, tests/integration/test_nvml_*.py): gcc and the C library
# headers to compile the simulated libnvidia-ml.so.1 (its nvml.h comes from the
# nvidia-nvml-dev wheel in the test extras, not from here), and umockdev so pyudev can
# enumerate fake NVIDIA PCI devices under `umockdev-run`.
set -euo pipefail
need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v umockdev-run >/dev/null 2>&1 || need+=(umockdev)
# pyudev loads libudev.so.1 at run time (agent/live.py).
ldconfig -p 2>/dev/null | grep -q 'libudev\.so\.1' || need+=(libudev1)
if [ "${#need[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
