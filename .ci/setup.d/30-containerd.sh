#!/usr/bin/env bash
# Real containerd for the container-stack integration tests (tests/integration/test_containerd_*):
# - Debian bookworm's containerd (1.6) + runc: the `config dump` oracle and the CRI daemon that
#   the end-to-end test starts in a temp root with its own socket (never the packaged service);
# - busybox-static: the locally built sandbox image (no registry is reachable from CI);
# - Debian trixie's containerd (1.7) .deb, downloaded from the Debian mirror this machine's apt
#   already uses and unpacked (not installed) into $DEST: the oracle for enable_cdi.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
DEST=${GNA_CONTAINERD17_DIR:-/opt/gpu-node-agent-ci/containerd-trixie}

if ! command -v containerd >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 \
    || [ ! -x /usr/bin/busybox ] || ! command -v ctr >/dev/null 2>&1; then
  install_without_services containerd.service containerd runc busybox-static
fi

if [ -x "$DEST/root/usr/bin/containerd" ] && "$DEST/root/usr/bin/containerd" --version | grep -q ' 1\.7\.'; then
  exit 0
fi
# The mirror from this machine's apt sources (deb822 or one-line), with the suite set to trixie,
# in a private apt state directory so the system's package lists are untouched.
uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
  | grep -v security | head -1 || true)
[ -n "$uri" ] || uri=$(grep -hsE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -1 || true)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
mkdir -p "$DEST/apt/lists/partial" "$DEST/apt/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" > "$DEST/trixie.list"
opts=(-o "Dir::Etc::SourceList=$DEST/trixie.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$DEST/apt/lists" -o "Dir::Cache=$DEST/apt/cache" -o Debug::NoLocking=1
      -o APT::Sandbox::User=root)
apt-get "${opts[@]}" -qq update
rm -f "$DEST"/containerd_*.deb
(cd "$DEST" && apt-get "${opts[@]}" -qq download containerd)
rm -rf "$DEST/root"
dpkg-deb -x "$(ls "$DEST"/containerd_*.deb | head -1)" "$DEST/root"
"$DEST/root/usr/bin/containerd" --version
