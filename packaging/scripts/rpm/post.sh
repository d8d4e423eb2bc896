# gpu-node-agent .rpm %post ($1: 1 = install, 2 = upgrade). Build the private venv from the
# offline wheelhouse, then what %systemd_post does: apply the preset policy on first install
# (RHEL's default preset leaves a third-party unit disabled; the agent needs its configuration
# before it runs). rpm runs scriptlets with /bin/sh.
/usr/lib/gpu-node-agent/install-venv || exit 1
if [ "$1" -eq 1 ] && command -v systemctl >/dev/null 2>&1; then
    systemctl --no-reload preset gpu-node-agent.service >/dev/null 2>&1 || :
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
exit 0
