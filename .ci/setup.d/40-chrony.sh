#!/usr/bin/env bash
# chrony (Debian's package) for the time-sync integration tests: they start their own
# `chronyd -x` processes on loopback ports (tests/integration/test_chrony_real.py) and never
# use the packaged service. Installing chrony must not start that service (it would steer
# this machine's clock), so a policy-rc.d that refuses service starts is put in place for the
# install when the machine has none (the Debian convention, invoke-rc.d(8)).
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
if command -v chronyd >/dev/null 2>&1 && command -v chronyc >/dev/null 2>&1; then
  exit 0
fi
install_without_services chrony.service chrony
