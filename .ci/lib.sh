# shellcheck shell=bash
# Shared by .ci/setup.d/*.sh (sourced, not run).
#
# Two ways a setup script provides what the tests drive:
#  - unpack_debs: a daemon or tool that is only a test oracle (containerd, runc, chronyd,
#    prometheus, ...) is downloaded as Debian's .deb and unpacked into the cache; nothing is
#    installed, no service exists, the system's apt state is untouched, and no root is needed.
#    The tests find the unpacked binaries (tests/components.py), never the machine's own.
#  - install_without_services: a tool a developer expects on the machine (compilers, linters)
#    is apt-get installed. Every package installed this way is listed in README.md ("What the
#    test command installs").

# The cache the components are unpacked into (gitignored; delete it to start over).
GNA_CI_CACHE=${GNA_CI_CACHE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/ci}
export GNA_CI_CACHE

# The Debian mirror this machine's apt already uses (deb822 or one-line sources), so the
# download works wherever apt does.
debian_mirror() {
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
    | grep -v -- '-security' | head -n 1 || true)
  [ -n "$uri" ] || uri=$(grep -hsE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' \
    | grep -v -- '-security' | head -n 1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# unpack_debs SUITE NAME PKG...: download PKGs (exact names, no dependencies) from SUITE of
# Debian's mirror with a private apt state under the cache, and unpack them with dpkg-deb -x
# into $GNA_CI_CACHE/NAME/root. Nothing runs from the packages (no maintainer scripts).
# Done once: a marker records the suite, the packages and their versions.
unpack_debs() {
  local suite=$1 name=$2
  shift 2
  local dest=$GNA_CI_CACHE/$name apt=$GNA_CI_CACHE/apt/$suite
  if [ -f "$dest/unpacked" ] && [ "$(head -n 1 "$dest/unpacked")" = "$suite $*" ]; then
    return 0
  fi
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror) $suite main" \
    > "$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
              -o "Dir::State::status=/dev/null" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  # One index download per suite and run (refreshed when older than 6 hours).
  if [ ! -e "$apt/updated" ] || [ -n "$(find "$apt/updated" -mmin +360 2>/dev/null)" ]; then
    apt-get "${opts[@]}" -qq update
    touch "$apt/updated"
  fi
  rm -rf "$dest"
  mkdir -p "$dest/debs"
  (cd "$dest/debs" && apt-get "${opts[@]}" -qq download "$@")
  local deb
  echo "$suite $*" > "$dest/unpacked.tmp"
  for deb in "$dest"/debs/*.deb; do
    dpkg-deb -x "$deb" "$dest/root"
    # shellcheck disable=SC2016  # dpkg-query's ${field} format, not a shell expansion
    dpkg-deb --showformat='${Package} ${Version}\n' -W "$deb" >> "$dest/unpacked.tmp"
  done
  rm -rf "$dest/debs"
  mv "$dest/unpacked.tmp" "$dest/unpacked"
  sed 1d "$dest/unpacked" | sed "s|^|unpacked into $dest: |"
}

# lib_wrapper NAME PROGRAM: $GNA_CI_CACHE/NAME/bin/<basename of PROGRAM>, a script that runs
# the unpacked PROGRAM (a path under NAME/root) with the shared libraries unpacked beside it
# found first (LD_LIBRARY_PATH is searched before an ELF RUNPATH: ld.so(8)). exec keeps the
# PID, so tests stop the real process by the PID they started.
lib_wrapper() {
  local name=$1 program=$2 root=$GNA_CI_CACHE/$1/root
  local libs=$root/usr/lib/x86_64-linux-gnu wrapper
  if [ -d "$libs/systemd" ]; then libs=$libs:$libs/systemd; fi
  mkdir -p "$GNA_CI_CACHE/$name/bin"
  wrapper=$GNA_CI_CACHE/$name/bin/$(basename "$program")
  cat > "$wrapper" <<WRAPPER
#!/bin/sh
LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "$root/$program" "\$@"
WRAPPER
  chmod 755 "$wrapper"
}

# install_without_services "UNITS" PKG...: apt-get install PKGs without starting the services
# they ship. A policy-rc.d that refuses service starts is in place for the install when the
# machine has none (the Debian convention, invoke-rc.d(8)); on a machine running systemd as
# PID 1 (which ignores policy-rc.d for deb-systemd-invoke) the UNITS are stopped and disabled.
# Only packages listed in README.md ("What the test command installs") may be installed here.
install_without_services() {
  local units=$1 guard=""
  shift
  if [ "$(id -u)" -ne 0 ]; then
    # A developer's run without root: the tests that need these skip, naming the script;
    # CI runs as root, and its integration step fails on any such skip.
    echo "not root: not installing $*; the tests that need them will skip" >&2
    return 0
  fi
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
