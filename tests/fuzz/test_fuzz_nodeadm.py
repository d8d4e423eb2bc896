"""nodeadm's NodeConfig and kubelet flags files (agent/safeio/nodeadm.py) over hostile text:
MIME multi-part user data with any headers and parts (base64, gzip, nested, cut off), YAML of
any shape, args/env files of any bytes. Nothing raises: ``node_configs`` answers
(documents, None) or ((), problem), and ``node_labels(args_words(text))`` a list of string
pairs."""
import base64
import gzip
from typing import Any

from hypothesis import strategies as st

from agent.safeio.nodeadm import args_words, kubelet_flags, node_configs, node_labels
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import JSON, NASTY, TEXT

NODECONFIG = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    flags:\n"
FLAG = st.one_of(st.builds(lambda k, v: f"--node-labels={k}={v}", NASTY, NASTY), NASTY)
YAML_DOC = st.one_of(
    st.lists(FLAG, max_size=4).map(lambda fs: NODECONFIG + "".join(
        f"    - {f!r}\n" for f in fs)),
    st.sampled_from(["kind: NodeConfig\nspec: &s {kubelet: *s}\n", "[" * 500, "kind: NodeConfig",
                     "kind: NodeConfig\nspec: {kubelet: {flags: 7}}\n", "a: !!binary ///\n"]),
    JSON.map(str), TEXT, NASTY)
ENCODED = st.one_of(
    YAML_DOC,
    YAML_DOC.map(lambda t: base64.b64encode(t.encode()).decode()),
    YAML_DOC.map(lambda t: base64.b64encode(gzip.compress(t.encode())).decode()),
    st.binary(max_size=64).map(lambda b: base64.b64encode(b"\x1f\x8b" + b).decode()))
HEADER = st.one_of(st.just("Content-Type: application/node.eks.aws"),
                   st.just("Content-Type: application/node.eks.aws\nContent-Transfer-Encoding: base64"),
                   st.just('Content-Type: multipart/mixed; boundary="C"'),
                   st.builds(lambda v: f"Content-Type: {v}", NASTY))
MIME = st.builds(
    lambda boundary, parts, cut: (
        f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{boundary}"\n\n'
        + "".join(f"--{boundary}\n{h}\n\n{b}\n" for h, b in parts)
        + ("" if cut else f"--{boundary}--\n")),
    st.sampled_from(["B", "==X==", "", "--", "a b"]),
    st.lists(st.tuples(HEADER, ENCODED), max_size=4), st.booleans())
FILE = st.one_of(MIME, YAML_DOC)
ARGS = st.one_of(
    st.lists(FLAG, max_size=4).map(lambda fs: 'NODEADM_KUBELET_ARGS="' + " ".join(fs) + '"'),
    st.lists(FLAG, max_size=4).map("\n".join), TEXT, NASTY)


def configs(text: Any) -> None:
    docs, problem = node_configs(text)
    expect(isinstance(docs, tuple), "documents not a tuple", docs)
    expect((problem is None) == bool(docs), "a problem beside documents, or neither", problem)
    for doc in docs:
        expect(all(isinstance(f, str) for f in kubelet_flags(doc)), "a flag not text", doc)


def labels(text: Any) -> None:
    pairs = node_labels(args_words(text))
    expect(all(isinstance(k, str) and k and isinstance(v, str) for k, v in pairs),
           "a label that is not a (key, value) of text", pairs)


test_node_configs_quick = quick(FILE, configs)
test_node_configs_deep = deep("nodeadm NodeConfig sources", FILE, configs)
test_node_labels_quick = quick(ARGS, labels)
test_node_labels_deep = deep("kubelet --node-labels", ARGS, labels)
