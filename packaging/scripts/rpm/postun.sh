# gpu-node-agent .rpm %postun ($1: 0 = erase, 1 = upgrade; the new package's %post has run).
# Upgrade: restart a running agent on the new venv (%systemd_postun_with_restart). Erase:
# delete the venv the %post built; rpm keeps a modified config as config.yaml.rpmsave and
# leaves /var/lib/gpu-node-agent (state) unless it is empty.
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
if [ "$1" -ge 1 ]; then
    if [ -d /run/systemd/system ]; then
        systemctl try-restart gpu-node-agent.service >/dev/null 2>&1 || :
    fi
else
    rm -rf /opt/gpu-node-agent
fi
exit 0
