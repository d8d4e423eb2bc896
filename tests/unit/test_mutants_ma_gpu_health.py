"""agent/gpu_health.py min_healthy_of: the `health.min_healthy_gpus` policy number, None for
"all" and for any policy that does not carry a usable number.

Expected values are written by hand from the function's docstring and checks/gpu/
health_policy.py ("all" is the default; a number is a GPU count, so at least 1).
"""
from types import SimpleNamespace

import pytest

from agent.gpu_health import min_healthy_of


def _policy(**health):
    return SimpleNamespace(policy=SimpleNamespace(health=SimpleNamespace(**health)))


@pytest.mark.parametrize("policy,expected", [
    (_policy(min_healthy_gpus=6), 6),
    (_policy(min_healthy_gpus=1), 1),
    (_policy(min_healthy_gpus=None), None),  # "all"
    (_policy(min_healthy_gpus=0), None),
    (_policy(min_healthy_gpus=-2), None),
    (_policy(min_healthy_gpus=True), None),
    (_policy(min_healthy_gpus="6"), None),
    (_policy(), None),  # a health section without the number
    (SimpleNamespace(policy=SimpleNamespace()), None),  # a policy without a health section
    (SimpleNamespace(), None),  # a bare policy
    (None, None),
])
def test_min_healthy_is_the_policy_number_or_none_for_all(policy, expected):
    assert min_healthy_of(policy) == expected
