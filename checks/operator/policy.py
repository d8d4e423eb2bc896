"""The `operator` policy section: where the NVIDIA GPU Operator puts the driver and the
container toolkit it manages on the host, where its validator writes readiness markers, and
the two gates policy version 2 adds (a grace period for the operator's driver, ownership
conflicts). checks.policy.Policy carries it as ``policy.operator``.

The defaults are what policy version 1 gets (no new gate): waiting for the operator is `skip`
for as long as it lasts, and an ownership conflict is not judged. policy_v2.yaml turns both on.
"""
from typing import Optional

from agent.driver_layout import OPERATOR_DRIVER_ROOT
from agent.safeio.schema import Field, Record

# NVIDIA/gpu-operator, api/nvidia/v1/clusterpolicy_types.go: ToolkitSpec.InstallDir, "Toolkit
# install directory on the host", +kubebuilder:default=/usr/local/nvidia. The toolkit container
# (NVIDIA/nvidia-container-toolkit, cmd/nvidia-ctk-installer/main.go: defaultToolkitInstallDir
# "/usr/local/nvidia", toolkitSubDir "toolkit", "the components of the toolkit will be
# installed to ROOT/toolkit") puts nvidia-container-runtime and nvidia-ctk in
# /usr/local/nvidia/toolkit on the host.
OPERATOR_TOOLKIT_ROOT = "/usr/local/nvidia/toolkit"
# NVIDIA/gpu-operator, cmd/nvidia-validator/main.go (defaultStatusPath
# "/run/nvidia/validations"): the operator validator's readiness markers (driver-ready,
# toolkit-ready, ...) live here.
OPERATOR_VALIDATIONS_DIR = "/run/nvidia/validations"


class _Strict(Record, frozen=True):
    """Unknown keys are refused."""


# An absolute host path without glob characters (the checks glob under it).
_HOST_DIR = r"^/[^*?\[\]]*$"


class OperatorPolicy(_Strict):
    # The host directory the operator's driver container exposes its root at.
    driver_root: str = Field(default=OPERATOR_DRIVER_ROOT, pattern=_HOST_DIR)
    # The host directory the operator's toolkit container installs the toolkit into.
    toolkit_root: str = Field(default=OPERATOR_TOOLKIT_ROOT, pattern=_HOST_DIR)
    # The host directory the operator validator writes its readiness markers into.
    validations_dir: str = Field(default=OPERATOR_VALIDATIONS_DIR, pattern=_HOST_DIR)
    # Seconds after boot (/proc/uptime) after which still waiting for the operator's driver
    # or toolkit fails; None = waiting is `skip` however long it lasts (version 1).
    grace_period_s: Optional[int] = Field(default=None, ge=0)
    # Whether a host driver/toolkit beside the operator's (and the reverse) fails the
    # gpu-operator check; False = reported only (version 1).
    ownership_conflicts: bool = False
    # Whether the driver and toolkit checks judge what the operator installed, once it is
    # there (driver-branch minimums, the module against the libnvidia-ml under driver_root,
    # the toolkit under toolkit_root); False = version 1's verdicts: driver-branch
    # not-applicable, toolkit-version skipped on operator paths.
    judge_managed: bool = False
