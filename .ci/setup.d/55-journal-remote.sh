#!/usr/bin/env bash
# systemd-journal-remote (Debian's package) for the kernel-log fallback tests
# (tests/integration/test_xid_journal.py): they turn journal export text into a real journal
# file with `systemd-journal-remote -o FILE -` and read it back with the real `journalctl
# --directory`. No service is used; a policy-rc.d that refuses service starts is put in place
# for the install when the machine has none (the Debian convention, invoke-rc.d(8)).
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
if [ -x /lib/systemd/systemd-journal-remote ] || [ -x /usr/lib/systemd/systemd-journal-remote ]; then
  exit 0
fi
install_without_services "systemd-journal-remote.socket systemd-journal-remote.service" \
  systemd-journal-remote
