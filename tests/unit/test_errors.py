"""One AgentError base carrying its exit code (agent/errors.py), mapped once by agent.cli.main.

The expected codes are README "Exit codes": 2 for usage or config errors (every bad value a user
can type, a bundle that cannot be read), 3 for internal errors only. Every exception class the
agent defines is either an AgentError or named below as deliberately not user-facing."""
import importlib
import inspect
import pkgutil

import pytest

import agent
from agent.errors import AgentError, BundleError, ConfigError, OutputError, ParseError, UsageError
from tests.conftest import run_cli

# Written from README "Exit codes", not read from the classes under test.
USER_ERRORS = {  # class (dotted) -> exit code
    "agent.errors.UsageError": 2,
    "agent.errors.ConfigError": 2,
    "agent.errors.BundleError": 2,
    "agent.errors.OutputError": 2,
    "agent.xid.clear.ClearUsageError": 2,
    "agent.outputs.webconfig.WebConfigError": 2,
    "agent.kube.kubeconfig.KubeconfigError": 2,
    "agent.kube.session.NoCredentials": 2,
    "agent.kube.credentials.CredentialError": 2,
    # Never meant to reach the user unmapped: one that does is the agent's bug.
    "agent.errors.ParseError": 3,
    "agent.safeio.jsonio.JsonError": 3,
    "agent.safeio.yamlio.YamlError": 3,
    "agent.safeio.schema.ValidationError": 3,
    "agent.engine.RegistryError": 3,
}

# Exceptions that are not AgentErrors on purpose (agent/errors.py says why).
NOT_USER_FACING = {
    "agent.kube.errors.ApiError",  # an API answer: callers make a verdict line or unknown
    "agent.kube.errors.Unreachable",  # likewise
    "agent.outputs.node.hints.NotRegistered",  # a Node not registered yet: not an error
    "agent.host.resolve.HostPathError",  # an OSError by contract: read as a missing file
    "agent.safeio.bounded.ReadCapExceeded",  # an OSError by contract: an unreadable file
    "agent.safeio.bounded.NotARegularFile",  # likewise
    "agent.host.redact.TooLarge",  # redaction's own signal, caught where it is raised
    # The schema's signals of one value's problems, gathered into its ValidationError.
    "agent.safeio.coerce.Invalid",
    "agent.safeio.coerce.Errors",
    # An assignment to a frozen record: a programming error (an AttributeError, as
    # dataclasses' FrozenInstanceError is), never a user's input.
    "agent.records.FrozenInstanceError",
}


def _agent_exception_classes():
    found = {}
    for info in pkgutil.walk_packages(agent.__path__, "agent."):
        if info.name == "agent.__main__":
            continue
        module = importlib.import_module(info.name)
        for _name, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == info.name:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_agent_exception_is_an_agent_error_or_named_as_not_user_facing():
    classes = _agent_exception_classes()
    assert set(USER_ERRORS) <= set(classes), set(USER_ERRORS) - set(classes)
    unclassified = {
        name for name, cls in classes.items()
        if not issubclass(cls, AgentError) and name not in NOT_USER_FACING
    }
    assert not unclassified, f"neither an AgentError nor named as not user-facing: {unclassified}"
    wrongly_listed = {n for n in NOT_USER_FACING if n in classes and issubclass(classes[n], AgentError)}
    assert not wrongly_listed


@pytest.mark.parametrize("name,code", sorted(USER_ERRORS.items()))
def test_each_error_carries_its_exit_code(name, code):
    cls = _agent_exception_classes()[name]
    assert issubclass(cls, AgentError)
    assert cls.exit_code == code


def test_errors_that_were_value_errors_still_are():
    # Callers that treat a ValueError as bad input keep catching these.
    from agent.safeio.jsonio import JsonError
    from agent.safeio.schema import ValidationError  # pydantic's was a ValueError too
    from agent.safeio.yamlio import YamlError
    from agent.xid.clear import ClearUsageError

    for cls in (ParseError, JsonError, YamlError, ClearUsageError, ValidationError):
        assert issubclass(cls, ValueError), cls
    import yaml

    assert issubclass(YamlError, yaml.YAMLError)


def _raising(monkeypatch, exc):
    import agent.cli

    def broken(args):
        raise exc

    monkeypatch.setattr(agent.cli, "cmd_version", broken)


@pytest.mark.parametrize("exc", [
    UsageError("--only: unknown check id nope"),
    ConfigError("/etc/x.yaml: field 'a': bad"),
    BundleError("b.tar.gz: not a bundle"),
    OutputError("out: exists"),
])
def test_main_maps_a_user_error_to_exit_2_and_one_line(monkeypatch, exc):
    _raising(monkeypatch, exc)
    res = run_cli(["version"])
    assert res.rc == 2
    assert res.err == f"gpu-node-agent: error: {exc}\n"
    # --debug shows tracebacks for internal errors only: a user error stays one line.
    assert run_cli(["--debug", "version"]).rc == 2


def test_main_maps_the_subsystem_errors_like_the_core_ones(monkeypatch):
    from agent.kube.kubeconfig import KubeconfigError
    from agent.outputs.webconfig import WebConfigError
    from agent.xid.clear import ClearUsageError

    for exc in (WebConfigError("/etc/web.yml: field 'x': bad"), KubeconfigError("kc: missing"),
                ClearUsageError("clear: expected a GPU index, UUID, PCI bus id or 'all', not 'x'")):
        _raising(monkeypatch, exc)
        res = run_cli(["version"])
        assert (res.rc, res.err) == (2, f"gpu-node-agent: error: {exc}\n"), exc


def test_an_internal_agent_error_reads_like_any_internal_error(monkeypatch):
    from agent.safeio.yamlio import YamlError

    _raising(monkeypatch, YamlError("too deep\nsecond line"))
    res = run_cli(["version"])
    assert res.rc == 3 and res.err == "gpu-node-agent: internal error: YamlError: too deep\n"
    with pytest.raises(YamlError):
        run_cli(["--debug", "version"])


def test_an_unclassified_agent_error_is_internal(monkeypatch):
    class Unclassified(AgentError):
        pass

    _raising(monkeypatch, Unclassified("oops"))
    res = run_cli(["version"])
    assert res.rc == 3 and res.err == "gpu-node-agent: internal error: Unclassified: oops\n"


def test_a_subclass_may_carry_another_code(monkeypatch):
    class Custom(AgentError):
        exit_code = 5

    _raising(monkeypatch, Custom("five"))
    res = run_cli(["version"])
    assert (res.rc, res.err) == (5, "gpu-node-agent: error: five\n")


def test_a_bad_clear_target_is_exit_2_with_the_clear_message(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"state_dir: {tmp_path}\n")
    res = run_cli(["clear", "gpu-four", "--config", str(cfg)])
    assert res.rc == 2
    assert res.err == ("gpu-node-agent: error: clear: expected a GPU index, UUID, PCI bus id or "
                       "'all', not 'gpu-four'\n")
