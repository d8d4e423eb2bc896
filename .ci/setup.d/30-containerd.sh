#!/usr/bin/env bash
# Real containerd for the container-stack integration tests (tests/integration/test_containerd_*,
# tests/integration/containerd/support.py), all unpacked into the cache, none installed, so no
# containerd service exists on this machine:
#  - Debian 12 bookworm's containerd (1.6): the `config dump` oracle and the CRI daemon the
#    end-to-end test starts in a temp root with its own socket;
#  - Debian 13 trixie's containerd (1.7): the oracle for enable_cdi and the CDI end-to-end test;
#  - Debian forky's containerd (2.1): the 2.x oracle (config version 3);
#  - bookworm's runc (the shims find it on PATH, which the tests set) and busybox-static (the
#    locally built sandbox image: no registry is reachable from CI).
# Each containerd .deb links only the C library, so the trixie and forky builds run here.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
unpack_debs bookworm containerd-1.6 containerd
unpack_debs trixie containerd-1.7 containerd
unpack_debs forky containerd-2.1 containerd
unpack_debs bookworm runc runc busybox-static
for series in 1.6 1.7 2.1; do
  out=$("$GNA_CI_CACHE/containerd-$series/root/usr/bin/containerd" --version)
  echo "$out"
  case "$out" in
    *" $series."*) ;;
    *) echo "containerd-$series: unexpected version: $out" >&2; exit 1 ;;
  esac
done
"$GNA_CI_CACHE/runc/root/usr/sbin/runc" --version | sed -n 1p  # sed reads it all: head could close the pipe first (EPIPE under pipefail)
