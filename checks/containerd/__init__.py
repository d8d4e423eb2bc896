"""The container stack: containerd-nvidia-runtime, containerd-cdi, cdi-spec-current and the
parsers they share (config.py, installed.py, effective.py, cdi_specs.py)."""
