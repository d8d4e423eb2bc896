# shellcheck shell=bash
# Shared by .ci/setup.d/*.sh (sourced, not run).
#
# install_without_services "UNITS" PKG...: apt-get install PKGs without starting the services
# they ship. Tests run the binaries themselves (containerd, chronyd, prometheus, ...) on
# loopback with temp state; a packaged service would steer this machine's clock or hold its
# ports. A policy-rc.d that refuses service starts is in place for the install when the
# machine has none (the Debian convention, invoke-rc.d(8)); on a machine running systemd as
# PID 1 (which ignores policy-rc.d for deb-systemd-invoke) the UNITS are stopped and disabled.
install_without_services() {
  local units=$1 guard=""
  shift
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    guard=/usr/sbin/policy-rc.d
  fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" || rc=$?
  if [ -n "$guard" ]; then rm -f "$guard"; fi
  if [ "$rc" -ne 0 ]; then return "$rc"; fi
  if [ -n "$units" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    # shellcheck disable=SC2086  # a space-separated list of unit names
    systemctl disable --now $units >/dev/null 2>&1 || true
  fi
}
