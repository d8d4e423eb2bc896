#!/bin/sh
# A gpu-node-agent site check (docs/site-checks.md): every InfiniBand port ACTIVE at the
# expected rate. Not enabled: copy it, root-owned and mode 0755, into the directory
# `site_checks.dir` names, with ib-ports.yaml beside it.
#
# Reads sysfs only (no /dev/infiniband access, so the agent's unit needs no drop-in):
# /sys/class/infiniband/<device>/ports/<port>/state is "4: ACTIVE" on a working port and rate
# is "<n> Gb/sec (<width> <speed>)" (Linux Documentation/ABI/stable/sysfs-class-infiniband;
# the strings are drivers/infiniband/core/sysfs.c's). link_layer tells InfiniBand from
# Ethernet (RoCE) ports, which this check leaves out.
set -u

# The rate every InfiniBand port must show, in Gb/sec: 400 for NDR, 200 for HDR.
EXPECTED_GBPS=400
SYSFS=/sys/class/infiniband

ports=0
bad=""
slow=""
for port in "$SYSFS"/*/ports/*; do
    [ -d "$port" ] || continue
    layer=$(cat "$port/link_layer" 2>/dev/null || echo InfiniBand)
    [ "$layer" = "InfiniBand" ] || continue
    dev=${port#"$SYSFS"/}
    dev=${dev%%/*}
    name="$dev/${port##*/}"
    ports=$((ports + 1))
    state=$(cat "$port/state" 2>/dev/null || echo "unreadable")
    rate=$(cat "$port/rate" 2>/dev/null || echo "unreadable")
    case "$state" in
        *ACTIVE*) ;;
        *) bad="$bad $name($state)"; continue ;;
    esac
    gbps=${rate%% *}
    case "$gbps" in
        ''|*[!0-9]*) slow="$slow $name($rate)" ;;
        *) [ "$gbps" -ge "$EXPECTED_GBPS" ] || slow="$slow $name($rate)" ;;
    esac
done

if [ "$ports" -eq 0 ]; then
    echo "no InfiniBand port under $SYSFS"
    exit 1
fi
if [ -n "$bad" ]; then
    echo "InfiniBand port(s) not ACTIVE:$bad"
    exit 1
fi
if [ -n "$slow" ]; then
    printf '{"status": "warn", "summary": "InfiniBand port(s) below %s Gb/sec:%s", "details": {"ports": %s}}\n' \
        "$EXPECTED_GBPS" "$slow" "$ports"
    exit 0
fi
echo "$ports InfiniBand port(s) ACTIVE at >= $EXPECTED_GBPS Gb/sec"
exit 0
