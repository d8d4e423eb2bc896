"""checks/containerd/effective.py piece by piece: where the CRI table is (_cri_from), the
configured handler and config path, which merge semantics resolve() evaluates and from what
(containerd's own `config dump` first), how decide() folds the views, and the exact fatal and
nodeadm outcomes.

Expected values are written by hand from containerd's documentation and source the modules
cite: config version 3 (containerd 2.x) keeps the runtimes under
plugins."io.containerd.cri.v1.runtime", version 2 under plugins."io.containerd.grpc.v1.cri",
version 1 under plugins.cri; `containerd --config PATH config dump` prints the effective
config and exits 1 on a config it rejects; nodeadm's config template (aws/eks-hybrid).
"""
from types import SimpleNamespace
from typing import Any, Dict, Tuple

import pytest

from agent.host.seam import Host
from agent.hostview import CommandResult
from agent.model import Outcome, Status
from checks.containerd.effective import (
    NODEADM_MARK,
    VERSION_DECIDES,
    Context,
    View,
    _cri_from,
    _settings,
    decide,
    fatal,
    nodeadm_fix,
    resolve,
)
from checks.containerd.installed import Installed
from tests.checks.answers_support import Answers

ROOT = "/etc/containerd/config.toml"
V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"
DUMP = ("containerd", "--config", ROOT, "config", "dump")
VERSION = ("containerd", "--version")


def ok(argv, stdout: str = "", rc: int = 0, stderr: str = "") -> CommandResult:
    return CommandResult(tuple(argv), rc, stdout, stderr)


def version_answer(v: str) -> Dict[Tuple[str, ...], CommandResult]:
    return {VERSION: ok(VERSION, f"containerd containerd.io {v} 05044ec0a9a75232cad458027ca83437aae3f4da\n")}


def write(root, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def pol(**containerd: Any) -> Any:
    return SimpleNamespace(settings={"containerd": containerd} if containerd else {})


def host(tmp_path, answers=None) -> Host:
    return Host(tmp_path, commands=Answers(answers))


# -- _cri_from / _settings -------------------------------------------------------------
def test_cri_table_by_config_version():
    both = {"plugins": {V3: {"enable_cdi": True}, V2: {"enable_cdi": False}, "cri": {"x": 1}}}
    assert _cri_from({"version": 3, **both}) == (3, {"enable_cdi": True})
    assert _cri_from({"version": 4, **both}) == (4, {"enable_cdi": True})
    assert _cri_from({"version": 2, **both}) == (2, {"enable_cdi": False})
    assert _cri_from({"version": 2, "plugins": {"cri": {"x": 1}, V3: {"y": 2}}}) == (2, {"x": 1})
    assert _cri_from({"plugins": {V2: {"z": 3}}}) == (0, {"z": 3})
    assert _cri_from({"version": 3, "plugins": {V2: {"z": 3}}}) == (3, {})
    assert _cri_from({"version": 2, "plugins": {V2: {}, "cri": {"x": 1}}}) == (2, {"x": 1})


def test_settings_default_and_configured():
    assert _settings(pol()) == ("nvidia", ROOT)
    assert _settings(SimpleNamespace(settings={"containerd": None})) == (  # type: ignore[arg-type]
        "nvidia", ROOT)
    assert _settings(pol(handler="", config_path="")) == ("nvidia", ROOT)
    assert _settings(pol(handler="nvidia-cdi", config_path="/etc/k8s/containerd.toml")) == (
        "nvidia-cdi", "/etc/k8s/containerd.toml")


# -- resolve -----------------------------------------------------------------------------
RUNTIME = f'[plugins."{V2}".containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'


def views(ctx: Context):
    return [(v.major, v.version, v.cri, v.source, v.loaded, v.errors) for v in ctx.views]


def test_known_1x_evaluates_1x_semantics_only(tmp_path):
    write(tmp_path, ROOT, "version = 2\n" + RUNTIME)
    ctx = resolve(host(tmp_path, version_answer("1.7.27")), pol())
    assert (ctx.handler, ctx.config_path, ctx.nodeadm) == ("nvidia", ROOT, False)
    assert ctx.installed == Installed((1, 7, 27), "containerd --version", "containerd")
    cri = {"containerd": {"runtimes": {"nvidia": {"runtime_type": "io.containerd.runc.v2"}}}}
    assert views(ctx) == [(1, 2, cri, "own merge with containerd 1.x semantics", [ROOT], [])]
    assert ctx.views[0].own is not None and ctx.views[0].own.major == 1
    assert ctx.host is not None
    assert ctx.details() == {"handler": "nvidia", "config_path": ROOT, "config_from": "containerd.config_path",
                             "containerd_version": "1.7.27",
                             "containerd_version_source": "containerd --version",
                             "nodeadm_host": False}


@pytest.mark.parametrize("v, major", [("2.0.0", 2), ("2.1.4", 2), ("1.99.0", 1)])
def test_installed_major_picks_the_semantics(tmp_path, v, major):
    write(tmp_path, ROOT, "version = 2\n")
    ctx = resolve(host(tmp_path, version_answer(v)), pol())
    assert [x.major for x in ctx.views] == [major]
    assert ctx.views[0].source == f"own merge with containerd {major}.x semantics"


@pytest.mark.parametrize("text, majors", [
    ("version = 3\n", [2]), ("version = 4\n", [2]), ("version = 2\n", [1, 2]),
    ("version = [\n", [1, 2]), (None, [1, 2]),
])
def test_unknown_version_evaluates_both_unless_the_root_is_version_3(tmp_path, text, majors):
    if text is not None:
        write(tmp_path, ROOT, text)
    ctx = resolve(host(tmp_path), pol())
    assert [x.major for x in ctx.views] == majors
    assert [x.source for x in ctx.views] == [
        f"own merge with containerd {m}.x semantics" for m in majors]
    assert ctx.installed == Installed(None, "", None)
    assert ctx.details()["containerd_version"] is None
    assert ctx.details()["containerd_version_source"] is None


def test_unknown_version_merge_errors_are_carried(tmp_path):
    write(tmp_path, ROOT, 'version = 2\nimports = ["/etc/containerd/gone.toml"]\n')
    ctx = resolve(host(tmp_path), pol())
    err = "/etc/containerd/gone.toml: imported but absent (containerd will not start)"
    assert [x.errors for x in ctx.views] == [[err], [err]]
    assert [x.loaded for x in ctx.views] == [[ROOT], [ROOT]]


def test_config_dump_decides_when_containerd_answers(tmp_path):
    write(tmp_path, ROOT, "version = 2\n")
    dumped = (f'version = 3\nimports = ["/etc/containerd/conf.d/*.toml", 5]\n'
              f'[plugins."{V3}"]\nenable_cdi = true\n')
    answers = {**version_answer("2.1.4"), DUMP: ok(DUMP, dumped)}
    h = host(tmp_path, answers)
    ctx = resolve(h, pol())
    # 2.x dumps the root's import patterns, not the files: the files are our walk's
    assert views(ctx) == [(2, 3, {"enable_cdi": True}, "containerd config dump", [ROOT], [])]
    assert (ctx.handler, ctx.config_path, ctx.nodeadm, ctx.host) == ("nvidia", ROOT, False, h)
    assert ctx.installed == Installed((2, 1, 4), "containerd --version", "containerd")


def test_config_dump_of_1x_names_the_files_it_loaded(tmp_path):
    write(tmp_path, ROOT, "version = 2\n")
    dumped = (f'version = 2\nimports = ["/etc/containerd/conf.d/99-nvidia.toml", 5]\n'
              f'[plugins."{V2}"]\nenable_cdi = true\n')
    h = host(tmp_path, {**version_answer("1.7.24"), DUMP: ok(DUMP, dumped)})
    ctx = resolve(h, pol())
    assert views(ctx) == [(1, 2, {"enable_cdi": True}, "containerd config dump",
                           ["/etc/containerd/conf.d/99-nvidia.toml"], [])]
    assert ctx.views[0].own is not None and ctx.views[0].own.loaded == [ROOT]


def test_config_dump_without_imports_lists_what_our_merge_loaded(tmp_path):
    write(tmp_path, ROOT, "version = 2\n")
    path = "/etc/k8s/containerd.toml"
    write(tmp_path, path, "version = 2\n")
    dump = ("containerd", "--config", path, "config", "dump")
    answers = {**version_answer("1.7.27"), dump: ok(dump, f'version = 2\n[plugins."{V2}"]\nx = 1\n')}
    ctx = resolve(host(tmp_path, answers), pol(config_path=path))
    assert views(ctx) == [(1, 2, {"x": 1}, "containerd config dump", [path], [])]


def test_config_dump_refusal_is_an_error_of_the_view(tmp_path):
    write(tmp_path, ROOT, "version = 2\n")
    refused = ok(DUMP, rc=1, stderr="containerd: failed to load TOML: invalid key\nmore\n")
    h = host(tmp_path, {**version_answer("2.1.4"), DUMP: refused})
    ctx = resolve(h, pol())
    assert (ctx.handler, ctx.config_path, ctx.nodeadm, ctx.host) == ("nvidia", ROOT, False, h)
    assert ctx.installed == Installed((2, 1, 4), "containerd --version", "containerd")
    problem = ("`containerd --config /etc/containerd/config.toml config dump` exited 1: "
               "containerd: failed to load TOML: invalid key")
    # containerd 2.x reads a version-2 root as version 3 (it migrates it when it loads it)
    assert views(ctx) == [(2, 3, {}, "containerd config dump", [],
                           [f"containerd rejects its config: {problem}"])]
    # our own merge stays with the view, for the checks' explanations
    assert ctx.views[0].own is not None and ctx.views[0].own.loaded == [ROOT]


def test_config_dump_refusal_prefers_our_own_parse_error(tmp_path):
    write(tmp_path, ROOT, "version = [\n")
    refused = ok(DUMP, rc=1, stderr="containerd: failed to load TOML\n")
    ctx = resolve(host(tmp_path, {**version_answer("2.1.4"), DUMP: refused}), pol())
    assert len(ctx.views) == 1 and ctx.views[0].source == "containerd config dump"
    assert len(ctx.views[0].errors) == 1
    assert ctx.views[0].errors[0].startswith(f"{ROOT}: ")


@pytest.mark.parametrize("where", ["/usr/bin/nodeadm", "/usr/local/bin/nodeadm", ROOT])
def test_nodeadm_host_by_binary_or_by_its_config_template(tmp_path, where):
    write(tmp_path, ROOT, "version = 2\n")
    write(tmp_path, where, f"version = 2\n# {NODEADM_MARK} (nodeadm template)\n")
    assert resolve(host(tmp_path), pol()).nodeadm is True


# -- decide --------------------------------------------------------------------------------
# decide and fatal never read the host; Context carries it for the evaluators.
NO_HOST = Host("/nonexistent-host-root")


def ctx_with(*majors: int) -> Context:
    return Context("nvidia", ROOT, Installed(None, "", None),
                   [View(m, 2, {}, f"own merge with containerd {m}.x semantics", [], None)
                    for m in majors], False, NO_HOST)


def by_major(outcomes: Dict[int, Outcome]):
    return lambda ctx, view: outcomes[view.major]


def test_decide_one_view_keeps_its_outcome():
    only = Outcome(Status.FAIL, "no nvidia runtime", {"a": 1}, "fix it")
    assert decide(ctx_with(2), by_major({2: only})) == only


def test_decide_agreeing_views_note_it():
    one = Outcome(Status.PASS, "ok under 1.x", {"a": 1}, None)
    two = Outcome(Status.PASS, "ok under 2.x", {"a": 2}, "r2")
    assert decide(ctx_with(1, 2), by_major({1: one, 2: two})) == Outcome(
        Status.PASS, "ok under 1.x",
        {"a": 1, "note": "containerd version unknown; 1.x and 2.x merging agree"}, None)
    assert one.details == {"a": 1}  # the view's own details are not changed


@pytest.mark.parametrize("s1, s2", [(Status.FAIL, Status.PASS), (Status.PASS, Status.WARN)])
def test_decide_disagreeing_views_are_unknown_naming_both(s1, s2):
    one = Outcome(s1, "first verdict", {"a": 1})
    two = Outcome(s2, "second verdict", {"b": 2})
    assert decide(ctx_with(1, 2), by_major({1: one, 2: two})) == Outcome(
        Status.UNKNOWN,
        f"containerd version unknown and the verdict depends on it (as 1.x: {s1.value}: first "
        f"verdict; as 2.x: {s2.value}: second verdict)",
        {"handler": "nvidia", "config_path": ROOT, "config_from": "containerd.config_path", "containerd_version": None,
         "containerd_version_source": None, "nodeadm_host": False,
         "verdicts": {"1": s1.value, "2": s2.value}},
        code="verdict-depends-on-version")
    # The outcome leaves the fix to the declared failure (the engine puts it in the result).
    assert VERSION_DECIDES.fix == (
        "Make `containerd --version` answer on this host (or record it in the bundle).")


# -- fatal / nodeadm_fix ----------------------------------------------------------------
def test_fatal_names_the_first_error_and_its_file():
    ctx = Context("nvidia", ROOT, Installed((2, 1, 4), "containerd --version", "containerd"),
                  [], True, NO_HOST)
    errors = [f"{ROOT}: invalid TOML: bad (at line 3, column 1)", "second: x"]
    view = View(2, 2, {}, "containerd config dump", [], None, errors)
    assert fatal(ctx, view) == Outcome(
        Status.FAIL, f"containerd cannot load its config: {errors[0]}",
        {"handler": "nvidia", "config_path": ROOT, "config_from": "containerd.config_path", "containerd_version": "2.1.4",
         "containerd_version_source": "containerd --version", "nodeadm_host": True,
         "errors": errors, "source": "containerd config dump"},
        f"Fix {ROOT} (containerd refuses to start with it), then restart containerd.",
        code="config-unloadable")
    assert fatal(ctx, View(2, 2, {}, "x", [], None, [])) is None


def test_nodeadm_fix_names_the_handler_and_both_drop_in_directories():
    assert nodeadm_fix("nv") == (
        "This is a nodeadm host: `nodeadm init` rewrites /etc/containerd/config.toml to import "
        "only /etc/containerd/config.d/*.toml, while nvidia-ctk 1.18.1+ writes "
        "/etc/containerd/conf.d/99-nvidia.toml (1.18.0 wrote config.d/). Have nodeadm write "
        "the runtime itself: in the NodeConfig set spec.containerd.config to a complete CRI "
        "section (nodeadm writes it to /etc/containerd/config.d/00-nodeadm.toml on every init; "
        "containerd 1.x replaces the whole CRI table with it), e.g. "
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nv] runtime_type = '
        '"io.containerd.runc.v2" with options BinaryName = "/usr/bin/nvidia-container-runtime", '
        "plus the runc runtime (SystemdCgroup = true), sandbox_image and registry config_path "
        "nodeadm sets; then re-run `nodeadm init` and this check.")
