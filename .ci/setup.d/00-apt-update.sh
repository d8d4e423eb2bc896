#!/usr/bin/env bash
# Refresh Debian's package lists once per machine, only when a later setup script has
# something to apt-get install (the unpacked components use their own lists in the cache).
set -euo pipefail
need=0
command -v gcc >/dev/null 2>&1 || need=1
[ -e /usr/include/stdio.h ] || need=1
command -v lintian >/dev/null 2>&1 || need=1
command -v rpm >/dev/null 2>&1 || need=1
command -v dpkg-architecture >/dev/null 2>&1 || need=1
ldconfig -p 2>/dev/null | grep -q 'libudev\.so\.1' || need=1
[ "$need" -eq 1 ] || exit 0
[ "$(id -u)" -eq 0 ] || exit 0  # not root: nothing will be installed (.ci/lib.sh)
stamp=/var/lib/apt/periodic/gpu-node-agent-update-stamp
if [ ! -e "$stamp" ] || [ -n "$(find "$stamp" -mmin +360 2>/dev/null)" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
