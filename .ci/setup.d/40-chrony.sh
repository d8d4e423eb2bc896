#!/usr/bin/env bash
# chrony (Debian bookworm's) for the time-sync integration tests: they start their own
# `chronyd -x` processes on loopback ports (tests/integration/test_chrony_real.py). It is
# unpacked into the cache, never installed: installing Debian's chrony package removes
# systemd-timesyncd (they conflict) and would start a service that steers this machine's clock.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
unpack_debs bookworm chrony chrony
"$GNA_CI_CACHE/chrony/root/usr/sbin/chronyd" -v
