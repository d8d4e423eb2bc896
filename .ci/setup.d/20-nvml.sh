#!/usr/bin/env bash
# The NVML tests (tests/nvml_sim, tests/integration/test_nvml_*.py):
#  - installed (a developer's compiler): gcc and the C library headers, to compile the
#    simulated libnvidia-ml.so.1 (its nvml.h comes from the nvidia-nvml-dev wheel in the test
#    extras); libudev1, which pyudev loads at run time (agent/host/live.py);
#  - unpacked into the cache (.ci/lib.sh unpack_debs): umockdev-run and its libraries
#    (libumockdev0, libpcap0.8), so pyudev enumerates fake NVIDIA PCI devices under it.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/include/stdio.h ] || need+=(libc6-dev)
ldconfig -p 2>/dev/null | grep -q 'libudev\.so\.1' || need+=(libudev1)
if [ "${#need[@]}" -gt 0 ]; then
  install_without_services "" "${need[@]}"
fi
unpack_debs bookworm umockdev umockdev libumockdev0 libpcap0.8
lib_wrapper umockdev usr/bin/umockdev-run
"$GNA_CI_CACHE/umockdev/bin/umockdev-run" --version
