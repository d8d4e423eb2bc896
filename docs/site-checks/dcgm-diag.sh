#!/bin/sh
# A gpu-node-agent site check (docs/site-checks.md): DCGM's level-1 diagnostic.
# Not enabled: copy it, root-owned and mode 0755, into the directory `site_checks.dir` names,
# with dcgm-diag.yaml beside it.
#
# `dcgmi diag -r 1` runs DCGM's quick ("level 1", readiness) tests: deployment and software
# checks, a few seconds (NVIDIA DCGM User Guide, "DCGM Diagnostics": run levels; `-j` prints
# JSON). It talks to nv-hostengine, so the DCGM service must run on the host.
#
# Exit codes (the site-check contract): 0 pass, 1 fail, anything else unknown. A warning
# is said on the first stdout line as JSON.
set -u

if ! command -v dcgmi >/dev/null 2>&1; then
    echo "dcgmi not installed (datacenter-gpu-manager)"
    exit 2
fi

out=$(dcgmi diag -r 1 -j 2>&1)
rc=$?
# DCGM's JSON names each test's result "Pass", "Fail", "Warn" or "Skip"; match them by name
# rather than by layout, which has changed between DCGM releases.
fails=$(printf '%s\n' "$out" | grep -c -i -E '"status"[[:space:]]*:[[:space:]]*"fail')
warns=$(printf '%s\n' "$out" | grep -c -i -E '"status"[[:space:]]*:[[:space:]]*"warn')

if [ "$rc" -ne 0 ] && [ "$fails" -eq 0 ]; then
    # No test failed, yet dcgmi did: it could not run them (nv-hostengine down, a GPU busy).
    echo "dcgmi diag -r 1 exited $rc without a failed test: $(printf '%s' "$out" | head -n 1)"
    exit 2
fi
if [ "$fails" -gt 0 ]; then
    echo "dcgmi diag -r 1: $fails test result(s) Fail"
    printf '%s\n' "$out"
    exit 1
fi
if [ "$warns" -gt 0 ]; then
    printf '{"status": "warn", "summary": "dcgmi diag -r 1: %s result(s) Warn", "details": {"warnings": %s}}\n' "$warns" "$warns"
    printf '%s\n' "$out"
    exit 0
fi
echo "dcgmi diag -r 1: every level-1 test passed"
exit 0
