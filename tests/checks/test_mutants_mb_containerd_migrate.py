"""checks/containerd/migrate.py: containerd 2.x's migration of the old CRI table to version 3.

Expected results written by hand from containerd 2.x plugins/cri/runtime/plugin.go and
plugins/cri/images/plugin.go configMigration, as the module states them: every old key but
the image, stream-server and sandbox_image keys moves to io.containerd.cri.v1.runtime (a key
the new table has wins); cni.bin_dir becomes cni.bin_dirs (unless bin_dirs is set);
containerd.* loses the snapshotter keys; sandbox_image becomes pinned_images.sandbox of
io.containerd.cri.v1.images, which also takes the registry/pull keys and the snapshotter
keys; the old table keeps what containerd leaves in it.
"""
from checks.containerd.migrate import migrate_to_v3

V2 = "io.containerd.grpc.v1.cri"
RT = "io.containerd.cri.v1.runtime"
IM = "io.containerd.cri.v1.images"


def test_every_kind_of_old_key_goes_where_containerd_puts_it():
    old = {
        "enable_cdi": True, "cdi_spec_dirs": ["/etc/cdi"], "device_ownership_from_security_context": True,
        "sandbox_image": "pause:3.10",
        "registry": {"config_path": "/etc/containerd/certs.d"}, "image_decryption": {"key_model": "node"},
        "max_concurrent_downloads": 3, "image_pull_progress_timeout": "5m",
        "image_pull_with_sync_fs": True, "stats_collect_period": 10,
        "disable_tcp_service": True, "stream_server_address": "127.0.0.1", "stream_server_port": "0",
        "stream_idle_timeout": "4h", "enable_tls_streaming": False, "x509_key_pair_streaming": {},
        "cni": {"bin_dir": "/opt/cni/bin", "conf_dir": "/etc/cni/net.d"},
        "containerd": {"snapshotter": "overlayfs", "disable_snapshot_annotations": True,
                       "discard_unpacked_layers": True, "default_runtime_name": "runc",
                       "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2"}}},
    }
    data = {"version": 2, "plugins": {V2: old}}
    migrate_to_v3(data)
    assert data["version"] == 3
    assert data["plugins"][RT] == {
        "cdi_spec_dirs": ["/etc/cdi"], "enable_cdi": True,
        "device_ownership_from_security_context": True,
        "cni": {"bin_dirs": ["/opt/cni/bin"], "conf_dir": "/etc/cni/net.d"},
        "containerd": {"default_runtime_name": "runc",
                       "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2"}}},
    }
    assert data["plugins"][IM] == {
        "pinned_images": {"sandbox": "pause:3.10"},
        "registry": {"config_path": "/etc/containerd/certs.d"}, "image_decryption": {"key_model": "node"},
        "max_concurrent_downloads": 3, "image_pull_progress_timeout": "5m",
        "image_pull_with_sync_fs": True, "stats_collect_period": 10,
        "snapshotter": "overlayfs", "disable_snapshot_annotations": True,
        "discard_unpacked_layers": True,
    }
    # the old table keeps what containerd does not move out of it
    assert sorted(data["plugins"][V2]) == [
        "device_ownership_from_security_context", "disable_tcp_service", "enable_tls_streaming",
        "image_decryption", "image_pull_progress_timeout", "image_pull_with_sync_fs",
        "max_concurrent_downloads", "registry", "stats_collect_period", "stream_idle_timeout",
        "stream_server_address", "stream_server_port", "x509_key_pair_streaming"]


def test_the_new_tables_keys_win_and_bin_dirs_is_kept():
    data = {"version": 2, "plugins": {
        V2: {"enable_cdi": False, "cni": {"bin_dir": "/old/bin", "conf_dir": "/old/net.d",
                                          "max_conf_num": 1},
             "containerd": {"default_runtime_name": "runc", "snapshotter": "native"},
             "sandbox_image": "pause:new", "max_concurrent_downloads": 9},
        RT: {"enable_cdi": True, "cni": {"bin_dirs": ["/new/bin"], "conf_dir": "/new/net.d"},
             "containerd": {"default_runtime_name": "nvidia"}},
        IM: {"pinned_images": {"sandbox": "pause:old", "other": "x"}, "max_concurrent_downloads": 1},
    }}
    migrate_to_v3(data)
    assert data["plugins"][RT] == {
        "enable_cdi": True,
        "cni": {"bin_dirs": ["/new/bin"], "conf_dir": "/new/net.d", "max_conf_num": 1},
        "containerd": {"default_runtime_name": "nvidia"},
    }
    # images: the old table's values are written over the new table's (images plugin.go)
    assert data["plugins"][IM] == {"pinned_images": {"sandbox": "pause:new", "other": "x"},
                                   "max_concurrent_downloads": 9, "snapshotter": "native"}


def test_an_empty_bin_dirs_takes_the_old_bin_dir():
    data = {"plugins": {V2: {"cni": {"bin_dir": "/opt/cni/bin"}}, RT: {"cni": {"bin_dirs": []}}}}
    migrate_to_v3(data)
    assert data["plugins"][RT]["cni"] == {"bin_dirs": ["/opt/cni/bin"]}


def test_new_tables_that_are_not_tables_are_replaced():
    data = {"plugins": {V2: {"enable_cdi": True, "sandbox_image": "p",
                             "cni": {"conf_dir": "/c"}, "containerd": {"default_runtime_name": "r"}},
                        RT: "garbage", IM: 3}}
    migrate_to_v3(data)
    assert data["plugins"][RT] == {"enable_cdi": True, "cni": {"conf_dir": "/c"},
                                   "containerd": {"default_runtime_name": "r"}}
    assert data["plugins"][IM] == {"pinned_images": {"sandbox": "p"}}


def test_cni_and_containerd_that_are_not_tables_move_nowhere():
    data = {"plugins": {V2: {"cni": "x", "containerd": ["y"], "enable_cdi": True}}}
    migrate_to_v3(data)
    assert data["plugins"][RT] == {"enable_cdi": True}
    assert data["plugins"][IM] == {}


def test_a_version_1_cri_table_is_migrated_when_no_version_2_one_exists():
    data = {"plugins": {"cri": {"enable_cdi": True, "sandbox_image": "p"}}}
    migrate_to_v3(data)
    assert data == {"version": 3, "plugins": {
        "cri": {}, RT: {"enable_cdi": True}, IM: {"pinned_images": {"sandbox": "p"}}}}


def test_the_version_2_table_is_preferred_over_the_version_1_one():
    data = {"plugins": {V2: {"enable_cdi": True}, "cri": {"enable_cdi": False}}}
    migrate_to_v3(data)
    assert data["plugins"][RT] == {"enable_cdi": True}
    assert data["plugins"]["cri"] == {"enable_cdi": False}


def test_without_an_old_table_only_the_version_changes():
    for data in ({"version": 2}, {"version": 2, "plugins": "x"}, {"plugins": {V2: "x"}}):
        before = dict(data)
        migrate_to_v3(data)
        assert data == {**before, "version": 3}
