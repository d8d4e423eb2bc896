#!/usr/bin/env bash
# systemd-journal-remote (Debian bookworm's) for the kernel-log fallback tests
# (tests/integration/test_xid_journal.py): they turn journal export text into a real journal
# file with `systemd-journal-remote -o FILE -` and read it back with the machine's own
# `journalctl --directory`. Unpacked into the cache with libmicrohttpd and libsystemd-shared
# of the same version (systemd's private library), never installed: no service.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
unpack_debs bookworm journal-remote systemd-journal-remote libmicrohttpd12 libsystemd-shared
lib_wrapper journal-remote lib/systemd/systemd-journal-remote
"$GNA_CI_CACHE/journal-remote/bin/systemd-journal-remote" --version | sed -n 1p  # sed reads it all: head could close the pipe first (EPIPE under pipefail)
