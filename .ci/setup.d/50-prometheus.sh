#!/usr/bin/env bash
# Prometheus, promtool, wrk and node_exporter (Debian's packages) for the metrics tests and
# the scrape bench: tests run `prometheus` and `prometheus-node-exporter` binaries directly on
# loopback ports with their own temp storage, never the packaged services. So the install must
# not start those services: a policy-rc.d that refuses service starts is put in place for the
# install when the machine has none (the Debian convention, invoke-rc.d(8)). systemd provides
# systemd-analyze for the unit tests (verify, security --offline=yes).
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v prometheus-node-exporter >/dev/null 2>&1 || need+=(prometheus-node-exporter)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi
# shellcheck disable=SC2068  # word splitting of the package list is intended
install_without_services "prometheus.service prometheus-node-exporter.service" ${need[@]}
