"""agent/safeio/nodeadm.py: NodeConfig sources read as nodeadm reads them
(awslabs/amazon-eks-ami nodeadm/internal/configprovider file.go, mime.go, encoding.go;
internal/api/merge.go) and the kubelet's flags as k8s.io/component-base MapStringString
parses --node-labels. Expected values are written from those sources."""
import base64
import gzip

import pytest

from agent.host.seam import Host
from agent.safeio.nodeadm import (
    MAX_INFLATED,
    args_words,
    flag_values,
    kubelet_flags,
    node_configs,
    node_labels,
    read_sources,
    source_files,
)

NODECONFIG = ("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n"
              "    flags:\n    - --node-labels=a.example/x=1\n")


def mime(*parts):
    body = "".join(f"--B\n{headers}\n\n{content}\n" for headers, content in parts)
    return f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n{body}--B--\n'


def tree(tmp_path, files):
    for rel, content in files.items():
        p = tmp_path / rel.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return Host(str(tmp_path))


@pytest.mark.parametrize("words, want", [
    (["--node-labels=a=1,b=2"], [("a", "1"), ("b", "2")]),
    (["--node-labels", "a=1"], [("a", "1")]),
    # Every instance adds (MapStringString.Set); keys and values are trimmed.
    (["--node-labels=a=1", "--v=2", "--node-labels= b = 2 ,"], [("a", "1"), ("b", "2")]),
    (["--node-labels=a="], [("a", "")]),
    # An item without '=' (the kubelet refuses it) and an empty key name no label.
    (["--node-labels=novalue,=x"], []),
    (["--node-labelsx=a=1", "-node-labels=a=1"], []),
    (["--node-labels"], []),
])
def test_node_labels(words, want):
    assert node_labels(words) == want


def test_flag_values_keep_order():
    assert flag_values(["--x=1", "--x", "2", "--y=3", "--x=4"], "x") == ["1", "2", "4"]


@pytest.mark.parametrize("text, want", [
    # nodeadm's environment file: KEY="..." expanded as $KEY, split at whitespace.
    ('NODEADM_KUBELET_ARGS="--a=1 --node-labels=k=v"', ["--a=1", "--node-labels=k=v"]),
    # the snap's args file: one flag a line, quoted values unquoted.
    ('--kubeconfig=/etc/kubernetes/kubelet.conf\n--node-labels="k=v,l="\n',
     ["--kubeconfig=/etc/kubernetes/kubelet.conf", "--node-labels=k=v,l="]),
    ("# --node-labels=commented\n\nKUBELET_EXTRA_ARGS=--node-labels=k=v # trailing\n",
     ["--node-labels=k=v"]),
])
def test_args_words(text, want):
    assert args_words(text) == want


def test_a_directory_source_reads_its_config_files_by_name(tmp_path):
    host = tree(tmp_path, {"/d/20-b.yml": NODECONFIG, "/d/10-a.YAML": NODECONFIG,
                           "/d/30-c.json": '{"kind": "NodeConfig", "spec": {}}',
                           "/d/README": "not read", "/d/40-d.yaml.bak": "not read"})
    assert source_files(host, "/d") == ["/d/10-a.YAML", "/d/20-b.yml", "/d/30-c.json"]
    assert source_files(host, "/d/20-b.yml") == ["/d/20-b.yml"]


def test_sources_keep_files_in_order_and_report_problems(tmp_path):
    host = tree(tmp_path, {"/d/10-a.yaml": NODECONFIG,
                           "/d/20-b.yaml": NODECONFIG.replace("x=1", "x=2"),
                           "/d/30-c.yaml": "[unclosed"})
    (source,) = read_sources(host, ["/d"], unreadable=True)
    assert [f.path for f in source.files] == ["/d/10-a.yaml", "/d/20-b.yaml", "/d/30-c.yaml"]
    # spec.kubelet.flags are appended across documents (api/merge.go transformKubeletFlags).
    flags = [f for file in source.files for doc in file.configs for f in kubelet_flags(doc)]
    assert flags == ["--node-labels=a.example/x=1", "--node-labels=a.example/x=2"]
    assert source.files[2].problem.startswith("not YAML")
    assert read_sources(host, ["/absent"], unreadable=True)[0].files == []


def test_a_multi_document_file_keeps_only_nodeconfigs():
    configs, problem = node_configs("kind: Other\nspec: {kubelet: {flags: [--x]}}\n---\n"
                                    + NODECONFIG)
    assert problem is None and [kubelet_flags(c) for c in configs] == [
        ["--node-labels=a.example/x=1"]]


def test_mime_user_data_takes_the_nodeconfig_parts_in_order():
    second = NODECONFIG.replace("x=1", "x=2")
    text = mime(('Content-Type: text/x-shellscript; charset="us-ascii"',
                 "#!/bin/bash\nkind: NodeConfig"),
                ("Content-Type: application/node.eks.aws", NODECONFIG),
                # base64 as Content-Transfer-Encoding (decoded by the MIME reader) ...
                ("Content-Type: application/node.eks.aws\nContent-Transfer-Encoding: base64",
                 base64.b64encode(second.encode()).decode()))
    configs, problem = node_configs(text)
    assert problem is None
    assert [kubelet_flags(c) for c in configs] == [["--node-labels=a.example/x=1"],
                                                   ["--node-labels=a.example/x=2"]]


def test_mime_parts_in_base64_and_gzip_without_headers_saying_so():
    # encoding.go: decodeIfBase64 then decompressIfGZIP, whatever the part's headers say.
    packed = base64.b64encode(gzip.compress(NODECONFIG.encode())).decode()
    configs, problem = node_configs(mime(("Content-Type: application/node.eks.aws", packed)))
    assert problem is None and kubelet_flags(configs[0]) == ["--node-labels=a.example/x=1"]


def test_mime_without_a_nodeconfig_part_is_a_problem():
    configs, problem = node_configs(mime(("Content-Type: text/x-shellscript", "#!/bin/sh")))
    assert configs == () and problem == "MIME user data without a application/node.eks.aws part"


def test_a_gzip_part_is_inflated_only_to_its_bound():
    bomb = base64.b64encode(gzip.compress(b"a" * (MAX_INFLATED + 1))).decode()
    configs, problem = node_configs(mime(("Content-Type: application/node.eks.aws", bomb)))
    assert configs == () and problem == f"a gzip part inflates past {MAX_INFLATED} bytes"


def test_a_yaml_file_that_names_a_content_type_is_still_yaml():
    # Not multi-part (no multipart Content-Type): nodeadm decodes the whole file.
    text = "# Content-Type: none\n" + NODECONFIG
    configs, problem = node_configs(text)
    assert problem is None and len(configs) == 1


@pytest.mark.parametrize("doc, want", [
    ({"kind": "NodeConfig", "spec": {"kubelet": {"flags": "--node-labels=a=1"}}}, []),
    ({"kind": "NodeConfig", "spec": {"kubelet": {"flags": ["--a", 3, None]}}}, ["--a"]),
    ({"kind": "NodeConfig", "spec": ["kubelet"]}, []),
])
def test_kubelet_flags_of_other_shapes(doc, want):
    assert kubelet_flags(doc) == want


def test_a_gzip_part_that_does_not_inflate_is_a_problem():
    # Found by tests/fuzz/test_fuzz_nodeadm.py: zlib.error escaped. "H4s00000" is base64 of
    # the gzip magic and a bad compression method; nodeadm's gzip reader refuses both.
    configs, problem = node_configs(mime(("Content-Type: application/node.eks.aws", "H4s00000")))
    assert configs == () and problem.startswith("a gzip part that does not inflate")
    cut = base64.b64encode(gzip.compress(NODECONFIG.encode())[:20]).decode()
    configs, problem = node_configs(mime(("Content-Type: application/node.eks.aws", cut)))
    assert configs == () and problem == "a gzip part cut short"
