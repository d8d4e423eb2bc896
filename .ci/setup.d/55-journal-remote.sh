#!/usr/bin/env bash
# systemd-journal-remote (Debian's package) for the kernel-log fallback tests
# (tests/integration/test_xid_journal.py): they turn journal export text into a real journal
# file with `systemd-journal-remote -o FILE -` and read it back with the real `journalctl
# --directory`. No service is used; a policy-rc.d that refuses service starts is put in place
# for the install when the machine has none (the Debian convention, invoke-rc.d(8)).
set -euo pipefail
if [ -x /lib/systemd/systemd-journal-remote ] || [ -x /usr/lib/systemd/systemd-journal-remote ]; then
  exit 0
fi
guard=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  guard=/usr/sbin/policy-rc.d
fi
trap '[ -n "$guard" ] && rm -f "$guard"' EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd-journal-remote
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemctl disable --now systemd-journal-remote.socket systemd-journal-remote.service >/dev/null 2>&1 || true
fi
