#!/usr/bin/env bash
# Prometheus, promtool and node_exporter (Debian bookworm's packages) for the metrics tests,
# and wrk for the scrape bench (bench/bench_scrape.py): unpacked into the cache, never
# installed, so no prometheus or node_exporter service exists on this machine. Tests run the
# binaries directly on loopback ports with their own temp storage. wrk needs LuaJIT's library,
# unpacked beside it (a wrapper in the cache sets the library path).
# systemd-analyze (verify, security --offline=yes) is the machine's own: systemd is part of
# every Debian system these tests target.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
unpack_debs bookworm prometheus prometheus prometheus-node-exporter
unpack_debs bookworm wrk wrk libluajit-5.1-2 libluajit-5.1-common
lib_wrapper wrk usr/bin/wrk
"$GNA_CI_CACHE/prometheus/root/usr/bin/prometheus" --version 2>&1 | sed -n 1p  # sed reads it all (no EPIPE under pipefail)
"$GNA_CI_CACHE/wrk/bin/wrk" --version 2>&1 | sed -n 1p || true  # wrk --version exits 1
command -v systemd-analyze >/dev/null || { echo "systemd-analyze missing: systemd is not installed" >&2; exit 1; }
