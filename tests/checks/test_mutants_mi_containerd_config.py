"""checks/containerd/config.py: the merge rules the mutation tier found untested.

Sources (containerd/containerd, read 2026-12):
- cmd/containerd/server/config/config.go ``LoadConfig`` (1.x and 2.x): imports are loaded
  breadth first; a path already loaded is skipped and loading goes on with the next one;
  ``resolveImports`` joins a relative import to the importing file's directory and globs it
  only when it holds ``*``.
- 1.x ``mergeConfig``: ``mergo.Merge(to, from, mergo.WithOverride, mergo.WithAppendSlice)``,
  then ``to.Plugins[k] = v`` for every plugin table of the imported file (a whole-table
  replace). mergo's WithOverride lets a source value replace the destination only when the
  source is not its type's zero value ("", 0, false, empty); WithAppendSlice appends lists.
- 2.x ``LoadConfig``: a file of version 0 or 1 is migrated (``MigrateConfigTo``) to the
  version merged so far before the merge (1 -> 2 renames the short plugin name ``cri`` to
  ``io.containerd.grpc.v1.cri``); a file of version 2 or more is merged as written, its
  version overriding; the merged config is migrated to version 3 after loading
  (docs/man/containerd-config.toml.5.md "version"; RELEASES.md, "Configuration version 3").
  Plugin maps are merged key by key (deep merge).
- The drop-in directories: nodeadm writes /etc/containerd/config.d, nvidia-ctk >= 1.18.1 and
  Canonical Kubernetes /etc/containerd/conf.d; both are scanned next to any root config.
"""
import pytest

from checks.containerd.config import (
    CRI_V1,
    CRI_V2,
    CRI_V3_RUNTIME,
    MAX_FILES,
    MAX_TOML_ITEMS,
    config_version,
    dropin_candidates,
    load_effective,
    parse_toml,
    resolve_imports,
)
from checks.containerd.migrate import CRI_V3_IMAGES
from tests.checks.containerd_support import tree

ROOT = "/etc/containerd/config.toml"
RUNC = {"runtime_type": "io.containerd.runc.v2"}


def effective(tmp_path, files, major):
    return load_effective(tree(tmp_path, files), ROOT, major)


# --- the TOML item cap (a guard of ours: MAX_TOML_ITEMS, not containerd's) ---------------

def test_exactly_the_cap_of_keys_parses() -> None:
    text = "".join(f"k{i} = 1\n" for i in range(MAX_TOML_ITEMS))
    assert parse_toml(text, "/c.toml") == ({f"k{i}": 1 for i in range(10_000)}, None)


@pytest.mark.parametrize("text", [
    "".join(f"k{i} = 1\n" for i in range(10_001)),  # "=": keys
    "".join(f"[t{i}]\n" for i in range(10_001)),  # "[": table headers
    "a " + "," * 10_001,  # ",": array items (counted before parsing, so any text counts)
], ids=["keys", "tables", "items"])
def test_one_item_over_the_cap_is_refused_before_parsing(text) -> None:
    assert parse_toml(text, "/c.toml") == (
        None, "/c.toml: invalid TOML: more than 10000 keys, tables and items")


def test_nesting_past_the_recursion_limit_is_named_not_raised() -> None:
    # 5,001 items: under the cap, but far deeper than the parser's recursion allows.
    text = "a = " + "[" * 5000 + "]" * 5000 + "\n"
    assert parse_toml(text, "/c.toml") == (None, "/c.toml: invalid TOML: RecursionError")


# --- config_version ------------------------------------------------------------------

def test_a_version_that_is_not_an_integer_reads_as_unset() -> None:
    # containerd's Config.Version is an int; 0 is "unset" (read as version 1). A boolean or
    # string is no version the merge can use, so it is the unset 0, never version 1.
    assert [config_version({"version": v}) for v in ("2", True, 2.0, [2])] == [0, 0, 0, 0]
    assert config_version({"version": 3}) == 3


# --- bundle configs that lost their quoting to redaction --------------------------------

def test_a_bundles_bare_redacted_value_is_quoted_back_before_parsing(tmp_path) -> None:
    auth = f'plugins."{CRI_V2}".registry.configs."r.example".auth'
    eff = effective(tmp_path, {ROOT: f'version = 2\n[{auth}]\nusername = "u"\npassword = REDACTED\n'}, 1)
    assert eff.errors == [] and eff.loaded == [ROOT]
    assert eff.merged == {"version": 2, "plugins": {CRI_V2: {"registry": {"configs": {
        "r.example": {"auth": {"username": "u", "password": "REDACTED"}}}}}}}


# --- resolve_imports -------------------------------------------------------------------

def test_a_bad_import_entry_is_skipped_and_the_rest_resolved(tmp_path) -> None:
    host = tree(tmp_path, {"/etc/containerd/conf.d/a.toml": ""})
    # A non-string or empty entry, then a wildcard in a directory (which Host.glob does not
    # expand): each skipped, and the entries after them still resolved.
    got = resolve_imports(host, ROOT, ["", 7, "/etc/*/x.toml", "conf.d/*.toml", "/x/y.toml"])
    assert got == ["/etc/containerd/conf.d/a.toml", "/x/y.toml"]


# --- load_effective: the walk -------------------------------------------------------------

def test_an_import_already_loaded_is_skipped_and_loading_goes_on(tmp_path) -> None:
    # conf.d/a.toml is named twice (explicitly, then by the glob): loaded once, then b.toml.
    eff = effective(tmp_path, {
        ROOT: 'imports = ["conf.d/a.toml", "conf.d/*.toml"]\n',
        "/etc/containerd/conf.d/a.toml": "oom_score = -1\n",
        "/etc/containerd/conf.d/b.toml": "oom_score = -2\n",
    }, 1)
    assert eff.loaded == [ROOT, "/etc/containerd/conf.d/a.toml", "/etc/containerd/conf.d/b.toml"]
    assert eff.errors == []
    assert eff.merged == {"imports": ["conf.d/a.toml", "conf.d/*.toml"], "oom_score": -2}


def test_at_most_max_files_are_loaded(tmp_path) -> None:
    names = [f"/etc/containerd/conf.d/{i:03d}.toml" for i in range(MAX_FILES + 6)]
    files = {name: "" for name in names}
    files[ROOT] = 'imports = ["conf.d/*.toml"]\n'
    eff = effective(tmp_path, files, 1)
    assert eff.loaded == [ROOT] + names[:63]  # 64 files in all, the root included


# --- 1.x: mergo WithOverride, WithAppendSlice ------------------------------------------------

def test_1x_a_non_zero_scalar_overrides_and_a_zero_one_does_not(tmp_path) -> None:
    eff = effective(tmp_path, {
        ROOT: 'imports = ["conf.d/*.toml"]\noom_score = -999\n'
              '[metrics]\ngrpc_histogram = false\naddress = "127.0.0.1:1338"\n',
        "/etc/containerd/conf.d/10.toml": 'oom_score = 1\n[metrics]\ngrpc_histogram = true\n',
        "/etc/containerd/conf.d/20.toml": '[metrics]\naddress = ""\n',
    }, 1)
    assert eff.merged == {"imports": ["conf.d/*.toml"], "oom_score": 1,
                          "metrics": {"grpc_histogram": True, "address": "127.0.0.1:1338"}}
    assert eff.plugin_owner == {} and eff.version == 0 and eff.cri_key() == CRI_V1


def test_1x_a_nested_plugins_table_merges_and_owns_nothing(tmp_path) -> None:
    # Only the top-level plugin tables have an owner; an unknown table that happens to hold a
    # `plugins` key merges by its names (mergo merges maps key by key) and owns nothing.
    eff = effective(tmp_path, {
        ROOT: 'imports = ["conf.d/*.toml"]\n[x.plugins.a]\nk = 1\n',
        "/etc/containerd/conf.d/10.toml": '[x.plugins.b]\nk = 2\n',
    }, 1)
    assert eff.merged == {"imports": ["conf.d/*.toml"],
                          "x": {"plugins": {"a": {"k": 1}, "b": {"k": 2}}}}
    assert eff.plugin_owner == {} and eff.errors == []



def test_1x_lists_are_appended_and_a_version_1_config_keeps_the_short_cri_name(tmp_path) -> None:
    # WithAppendSlice: an imported list is appended to the one merged so far. A version-1
    # config names the CRI plugin `cri` (1.x migrates it to the full name on load), so that is
    # where its runtimes are read.
    eff = effective(tmp_path, {
        ROOT: 'version = 1\nimports = ["conf.d/*.toml"]\n'
              'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs"]\n'
              '[plugins.cri.containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n',
        "/etc/containerd/conf.d/10.toml": 'disabled_plugins = ["io.containerd.snapshotter.v1.zfs"]\n',
    }, 1)
    assert eff.errors == [] and eff.version == 1 and eff.cri_key() == CRI_V1
    assert eff.merged == {
        "version": 1, "imports": ["conf.d/*.toml"],
        "disabled_plugins": ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs"],
        "plugins": {"cri": {"containerd": {"runtimes": {"nvidia": RUNC}}}}}
    assert eff.runtimes() == {"nvidia": RUNC}
    assert eff.plugin_owner == {"cri": ROOT}

# --- 2.x: migration of drop-ins before the merge ----------------------------------------------

V2_ROOT = (f'version = 2\nimports = ["conf.d/*.toml"]\n'
           f'[plugins."{CRI_V2}".containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n')


def test_2x_version_1_drop_ins_are_renamed_to_the_v2_plugin_before_merging(tmp_path) -> None:
    a = '[plugins.cri.containerd.runtimes.a]\nruntime_type = "io.containerd.runc.v2"\n'
    b = 'version = 1\n[plugins.cri.containerd.runtimes.b]\nruntime_type = "io.containerd.runc.v2"\n'
    eff = effective(tmp_path, {ROOT: V2_ROOT, "/etc/containerd/conf.d/10-a.toml": a,
                               "/etc/containerd/conf.d/20-b.toml": b}, 2)
    assert eff.errors == [] and eff.version == 3
    # Both drop-ins became version 2 ("cri" -> the v2 name) and merged into the root's CRI
    # table; the merged version-2 config was then migrated to version 3 (the runtimes move
    # to the runtime plugin; the old table keeps what version 3 does not take).
    assert eff.merged == {"version": 3, "imports": ["conf.d/*.toml"], "plugins": {
        CRI_V2: {},
        CRI_V3_RUNTIME: {"containerd": {"runtimes": {"runc": RUNC, "a": RUNC, "b": RUNC}}},
        CRI_V3_IMAGES: {},
    }}
    # The parsed files are kept as written, not as migrated.
    assert eff.files["/etc/containerd/conf.d/10-a.toml"] == {
        "plugins": {"cri": {"containerd": {"runtimes": {"a": RUNC}}}}}
    assert eff.files["/etc/containerd/conf.d/20-b.toml"] == {
        "version": 1, "plugins": {"cri": {"containerd": {"runtimes": {"b": RUNC}}}}}


def test_2x_a_version_3_drop_in_makes_the_roots_v2_table_unread(tmp_path) -> None:
    # The drop-in's version 3 overrides the root's 2; the merged config is then version 3
    # already, so nothing migrates the root's version-2 CRI table: its runtime is not seen.
    dropin = (f'version = 3\n[plugins."{CRI_V3_RUNTIME}".containerd.runtimes.nvidia]\n'
              'runtime_type = "io.containerd.runc.v2"\n')
    eff = effective(tmp_path, {ROOT: V2_ROOT, "/etc/containerd/conf.d/99-nvidia.toml": dropin}, 2)
    assert eff.errors == [] and eff.version == 3
    assert eff.merged == {"version": 3, "imports": ["conf.d/*.toml"], "plugins": {
        CRI_V2: {"containerd": {"runtimes": {"runc": RUNC}}},
        CRI_V3_RUNTIME: {"containerd": {"runtimes": {"nvidia": RUNC}}},
    }}
    assert eff.runtimes() == {"nvidia": RUNC}


def test_2x_a_version_2_drop_in_under_a_v3_root_is_merged_then_migrated(tmp_path) -> None:
    # The version-2 drop-in is merged as written (its version 2 overriding the root's 3), and
    # the merged config migrated to version 3 afterwards: the migration only fills keys the
    # version-3 table lacks, so the root's runc options win over the drop-in's.
    root = (f'version = 3\nimports = ["conf.d/*.toml"]\n'
            f'[plugins."{CRI_V3_RUNTIME}".containerd.runtimes.runc.options]\nBinaryName = "/a"\n')
    dropin = (f'version = 2\n[plugins."{CRI_V2}".containerd.runtimes.runc.options]\n'
              'BinaryName = "/b"\n'
              f'[plugins."{CRI_V2}".containerd.runtimes.nvidia]\nruntime_type = "io.containerd.runc.v2"\n')
    eff = effective(tmp_path, {ROOT: root, "/etc/containerd/conf.d/50.toml": dropin}, 2)
    assert eff.errors == [] and eff.version == 3
    assert eff.runtimes() == {"runc": {"options": {"BinaryName": "/a"}}}
    assert eff.merged == {"version": 3, "imports": ["conf.d/*.toml"], "plugins": {
        CRI_V3_RUNTIME: {"containerd": {"runtimes": {"runc": {"options": {"BinaryName": "/a"}}}}},
        CRI_V2: {},
        CRI_V3_IMAGES: {},
    }}


def test_2x_a_later_drop_in_changes_one_plugin_table_only(tmp_path) -> None:
    # A version-1 drop-in's CRI registry settings are migrated into the images plugin (the
    # old table keeps them, as containerd leaves it). A later version-3 drop-in that changes
    # the images plugin's registry must leave the old table's copy as it was.
    eff = effective(tmp_path, {
        ROOT: f'version = 3\nimports = ["conf.d/*.toml"]\n[plugins."{CRI_V3_RUNTIME}"]\nenable_cdi = true\n',
        "/etc/containerd/conf.d/10.toml":
            '[plugins.cri.registry]\nconfig_path = "/etc/containerd/certs.d"\n',
        "/etc/containerd/conf.d/20.toml":
            f'version = 3\n[plugins."{CRI_V3_IMAGES}".registry]\nconfig_path = "/x"\n',
    }, 2)
    assert eff.errors == [] and eff.version == 3
    assert eff.merged == {"version": 3, "imports": ["conf.d/*.toml"], "plugins": {
        CRI_V3_RUNTIME: {"enable_cdi": True},
        CRI_V2: {"registry": {"config_path": "/etc/containerd/certs.d"}},
        CRI_V3_IMAGES: {"registry": {"config_path": "/x"}},
    }}


# --- the drop-in directories -----------------------------------------------------------

def test_drop_ins_next_to_any_root_then_the_standard_directories(tmp_path) -> None:
    host = tree(tmp_path, {
        "/opt/ctr/config.toml": "", "/opt/ctr/conf.d/a.toml": "", "/opt/ctr/config.d/b.toml": "",
        "/opt/ctr/extra.toml": "", "/opt/ctr/notes.txt": "",
        "/etc/containerd/conf.d/c.toml": "", "/etc/containerd/config.d/d.toml": "",
    })
    assert dropin_candidates(host, "/opt/ctr/config.toml") == [
        "/opt/ctr/conf.d/a.toml", "/opt/ctr/config.d/b.toml", "/opt/ctr/extra.toml",
        "/etc/containerd/conf.d/c.toml", "/etc/containerd/config.d/d.toml"]


def test_the_default_roots_directory_is_scanned_without_duplicates(tmp_path) -> None:
    host = tree(tmp_path, {ROOT: "", "/etc/containerd/other.toml": "",
                           "/etc/containerd/conf.d/c.toml": ""})
    assert dropin_candidates(host, ROOT) == ["/etc/containerd/conf.d/c.toml",
                                             "/etc/containerd/other.toml"]


def test_a_root_in_a_wildcard_directory_still_scans_the_standard_directories(tmp_path) -> None:
    host = tree(tmp_path, {"/etc/containerd/conf.d/c.toml": "",
                           "/etc/containerd/config.d/d.toml": ""})
    assert dropin_candidates(host, "/srv/ctr[1]/config.toml") == [
        "/etc/containerd/conf.d/c.toml", "/etc/containerd/config.d/d.toml"]
