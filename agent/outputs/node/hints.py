"""Why a read of the Node failed, in one line with the likely cause: rejected or absent
credentials, a wrong node name (the Node authorizer lets system:node:<name> read only its own
Node), credentials that are not a node identity, or a Node not registered yet."""

import os
from typing import Optional

from agent.kube.credentials import CredentialError
from agent.kube.errors import ApiError, Unreachable
from agent.kube.kubeconfig import KubeconfigError
from agent.kube.session import KubeSession, node_identity_name


class NotRegistered(Exception):
    """The Node does not exist yet and the credentials are this node's own: the kubelet has
    not registered it (before `nodeadm init` / `kubeadm join`). Not an error."""


def describe_read(
    exc: ApiError, name: Optional[str], source: str, session: KubeSession
) -> str:
    """One line with the cause, for a GET of the Node ``name`` (found in ``source``) that did
    not answer it. Raises NotRegistered when the Node is simply not there yet."""
    base = f"cannot read Node {name!r} (name from {source}): HTTP {exc.status}: {exc.message}"
    if exc.status == 401:
        return (f"{base}; the server rejected the credentials: "
                f"{credential_source(session)} (expired, revoked or from another cluster)")
    if exc.status == 403 and "system:anonymous" in exc.message:
        return (f"{base}; the server saw no credentials (system:anonymous): the kubeconfig's "
                f"{credential_source(session)} did not reach it")
    if exc.status not in (403, 404):
        return base
    user, how = session.identity()
    ident = node_identity_name(user)
    if exc.status == 404 and ident is not None and ident == name:
        raise NotRegistered(
            f"Node {name!r} is not registered yet (the credentials are {user}, from {how}): "
            "the kubelet registers it when it joins; nothing to write until then"
        )
    if ident is not None and ident != name:
        return (f"{base}; the name is wrong: the credentials are {user} (from {how}), which "
                f"may only read Node {ident!r}: set kube.node_name: {ident}")
    if user is not None and ident is None:
        return (f"{base}; the credentials are {user} (from {how}), not a node identity "
                "(system:node:<name>): use the kubelet's kubeconfig")
    return f"{base}; the credentials' identity is {how}"

def credential_source(session: KubeSession) -> str:
    try:
        kc = session.client().kubeconfig
    except (KubeconfigError, Unreachable):
        return "credentials"
    if kc.exec_spec is not None:
        return f"exec plugin {os.path.basename(kc.exec_spec.command)}"
    try:
        creds = kc.credentials()
    except CredentialError:  # a hint; the request itself already failed
        return "credentials"
    cert = getattr(creds, "cert_file", None)
    if cert and not creds.token:
        return f"client certificate {cert}"
    return "bearer token"
