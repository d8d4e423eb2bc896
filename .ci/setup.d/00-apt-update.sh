#!/usr/bin/env bash
# Refresh Debian's package lists once per machine (later setup scripts apt-get install).
set -euo pipefail
stamp=/var/lib/apt/periodic/gpu-node-agent-update-stamp
if [ ! -e "$stamp" ] || [ -n "$(find "$stamp" -mmin +360 2>/dev/null)" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  mkdir -p "$(dirname "$stamp")" && touch "$stamp"
fi
