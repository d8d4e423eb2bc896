# gpu-node-agent .rpm %preun ($1: 0 = erase, 1 = upgrade): on erase, disable the service and
# stop it where systemd is running (%systemd_preun).
if [ "$1" -eq 0 ] && command -v systemctl >/dev/null 2>&1; then
    systemctl --no-reload disable gpu-node-agent.service >/dev/null 2>&1 || :
    if [ -d /run/systemd/system ]; then
        systemctl stop gpu-node-agent.service >/dev/null 2>&1 || :
    fi
fi
exit 0
