"""Node-name lookup (agent/kube/nodename.py) over hostile files: nodeadm NodeConfig YAML with
any value in any field, kubelet args/env files, a client certificate file of any bytes, any
hostname. The lookup never raises: a source that does not name a valid Node is passed over,
and the answer is a valid Node name (an RFC 1123 DNS subdomain, as the API server requires)
or ``(None, why)``."""
import base64
import re
from typing import Any, Dict, List, Optional

import yaml
from hypothesis import strategies as st

from agent.kube.nodename import (
    KUBELET_ARGS_FILES,
    KUBELET_CLIENT_CERTS,
    NODEADM_CONFIGS,
    hostname_override,
    resolve_node_name,
)
from tests.fuzz.conftest import deep, expect, quick
from tests.fuzz.strategies import JSON, NASTY, TEXT

# k8s.io/apimachinery validation IsDNS1123Subdomain, written out from its definition.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _dump(doc: Any) -> str:
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError):
        return "kind: NodeConfig\n"


NAME = st.one_of(st.sampled_from(["mi-0123456789abcdef0", "GPU-Host", "a..b", "-x", "x" * 300]),
                 NASTY, JSON)
NODECONFIG = st.one_of(
    st.fixed_dictionaries({"kind": st.one_of(st.just("NodeConfig"), JSON)}, optional={
        "spec": st.one_of(st.fixed_dictionaries({}, optional={
            "hybrid": st.one_of(st.fixed_dictionaries({}, optional={"nodeName": NAME}), JSON)}),
            JSON)}).map(_dump),
    st.sampled_from(["a: !!timestamp 2001-13-45\n", "a: !!binary ///\n", "&a [*a]\n",
                     "[" * 2000, "kind: NodeConfig\nspec: &s {hybrid: *s}\n",
                     "? [a]\n: b\n", "a: !!python/object:os.system x\n", "<<: 5\n"]),
    TEXT, NASTY,
)
ARGS = st.one_of(
    st.builds(lambda v, q: f'KUBELET_ARGS="--node-ip=10.0.0.5 --hostname-override{q}{v}"\n',
              st.one_of(st.sampled_from(["node-a", "Node-B", "''", "x/../y", "a b"]), NASTY),
              st.sampled_from(["=", " ", "=\"", "='"])),
    TEXT, NASTY)
PEM_BODY = st.one_of(st.binary(max_size=200).map(base64.b64encode), st.binary(max_size=64))
CERT = st.one_of(
    st.builds(lambda body: b"-----BEGIN CERTIFICATE-----\n" + body + b"\n-----END CERTIFICATE-----\n",
              PEM_BODY),
    st.binary(max_size=200),
    st.none())
FILES = st.fixed_dictionaries({}, optional={
    **{p: NODECONFIG for p in NODEADM_CONFIGS[1:]},
    **{p: ARGS for p in KUBELET_ARGS_FILES},
})
DIRS = st.fixed_dictionaries({}, optional={NODEADM_CONFIGS[0]: st.dictionaries(
    st.one_of(st.sampled_from(["10-a.yaml", "20-b.yaml"]), TEXT), NODECONFIG, max_size=3)})
CASES = st.tuples(FILES, DIRS, st.fixed_dictionaries({}, optional={
    p: CERT for p in KUBELET_CLIENT_CERTS}), st.one_of(st.none(), NASTY, NAME.map(str)))


class FileHost:
    """The Host calls the lookup makes, answering from the fuzzed contents."""

    def __init__(self, files: Dict[str, str], dirs: Dict[str, Dict[str, str]],
                 certs: Dict[str, Optional[bytes]], hostname: Optional[str]) -> None:
        self.files = dict(files)
        for d, entries in dirs.items():
            for name, text in entries.items():
                self.files[f"{d}/{name}"] = text
        self.dirs = {d: list(entries) for d, entries in dirs.items()}
        self.certs = certs
        self._hostname = hostname

    def listdir(self, path: str) -> List[str]:
        return list(self.dirs.get(path, []))

    def read_text_or_none(self, path: str) -> Optional[str]:
        return self.files.get(path)

    def read_bytes(self, path: str) -> bytes:
        data = self.certs.get(path)
        if data is None:
            raise FileNotFoundError(path)
        return data

    def hostname(self) -> Optional[str]:
        return self._hostname.strip() if self._hostname else None


def node_name(case: Any) -> None:
    files, dirs, certs, hostname = case
    for text in files.values():
        hostname_override(text)
    name, why = resolve_node_name(FileHost(files, dirs, certs, hostname))
    expect(isinstance(why, str), "the reason is not text", why)
    if name is not None:
        expect(isinstance(name, str) and len(name) <= 253
               and DNS_SUBDOMAIN.fullmatch(name) is not None, "not a valid Node name", name)


test_node_name_quick = quick(CASES, node_name)
test_node_name_deep = deep("node-name lookup", CASES, node_name)
