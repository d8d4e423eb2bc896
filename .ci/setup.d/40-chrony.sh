#!/usr/bin/env bash
# chrony (Debian's package) for the time-sync integration tests: they start their own
# `chronyd -x` processes on loopback ports (tests/integration/test_chrony_real.py) and never
# use the packaged service. Installing chrony must not start that service (it would steer
# this machine's clock), so a policy-rc.d that refuses service starts is put in place for the
# install when the machine has none (the Debian convention, invoke-rc.d(8)).
set -euo pipefail
if command -v chronyd >/dev/null 2>&1 && command -v chronyc >/dev/null 2>&1; then
  exit 0
fi
guard=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  guard=/usr/sbin/policy-rc.d
fi
trap 'if [ -n "$guard" ]; then rm -f "$guard"; fi' EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chrony
# Belt and braces: a packaged chronyd that did start anyway (a machine running systemd as PID 1
# ignores policy-rc.d for deb-systemd-invoke) is stopped, so only the tests' daemons run.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now chrony.service >/dev/null 2>&1 || true
fi
