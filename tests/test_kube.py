"""Credentials: kubeconfig files through the official client (contexts, exec plugins), and
in-cluster ServiceAccount files with token rotation, without it. No cluster needed but for
the last test, which talks to the session's API server as a pod does."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from edgetrain import kube
from edgetrain.cluster.kubeconfig import write_kubeconfig
from edgetrain.cluster.pki import ensure_pki
from edgetrain.kube import (
    ENV_SERVICE_ACCOUNT_DIR,
    KubeClient,
    KubeconfigError,
    load_configuration,
    node_ready,
    node_schedulable,
)


def _kubeconfig(path: Path, user: str, contexts: str = "[{name: c, context: {cluster: k, "
                "user: u}}]") -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"contexts: {contexts}\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}, "
        "{name: k2, cluster: {server: 'https://127.0.0.2:2'}}]\n"
        f"users: [{{name: u, user: {user}}}]\n")
    return path


def test_kubeconfig_with_client_certificates(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki")
    path = write_kubeconfig(tmp_path / "kc", server="https://127.0.0.1:6443", ca_crt=pki.ca_crt,
                            client_crt=pki.client_crt("admin"),
                            client_key=pki.client_key("admin"), user="admin")
    cfg = load_configuration(path)
    assert cfg.host == "https://127.0.0.1:6443"
    assert Path(cfg.ssl_ca_cert).read_bytes() == pki.ca_crt.read_bytes()
    assert Path(cfg.key_file).read_bytes() == pki.client_key("admin").read_bytes()


def test_context_is_chosen_and_unknown_context_named(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", "{token: t0}",
                       "[{name: c, context: {cluster: k, user: u}}, "
                       "{name: other, context: {cluster: k2, user: u}}]")
    assert load_configuration(path).host == "https://127.0.0.1:1"
    assert load_configuration(path, context="other").host == "https://127.0.0.2:2"
    with pytest.raises(KubeconfigError, match=r"no context 'nope' \(known: c, other\)"):
        load_configuration(path, context="nope")


def test_exec_plugin_supplies_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        ) -> None:
    plugin = tmp_path / "bin" / "fake-auth"
    plugin.parent.mkdir()
    cred = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
            "status": {"token": "from-plugin"}}
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(cred)}'\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{plugin.parent}:/usr/bin:/bin")
    path = _kubeconfig(tmp_path / "kc", "{exec: {apiVersion: client.authentication.k8s.io/v1, "
                                        "command: fake-auth}}")
    assert load_configuration(path).get_api_key_with_prefix("BearerToken") == \
        "Bearer from-plugin"


def test_missing_exec_plugin_is_named(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", "{exec: {apiVersion: client.authentication.k8s.io/v1, "
                                        "command: aws-iam-authenticator-missing}}")
    with pytest.raises(KubeconfigError, match="exec plugin 'aws-iam-authenticator-missing', "
                                              "which is not on PATH"):
        load_configuration(path)


def test_unreadable_kubeconfig_says_so(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="cannot read kubeconfig"):
        load_configuration(tmp_path / "absent")


def _in_cluster_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pod's view: the service-account folder (token "first", the CA) and the in-cluster
    environment pointing at it."""
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("first")
    (sa / "ca.crt").write_bytes(ensure_pki(tmp_path / "pki").ca_crt.read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.9")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setenv(kube.ENV_SERVICE_ACCOUNT_DIR, str(sa))
    return sa


def test_in_cluster_token_is_reread_after_rotation(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sa = _in_cluster_service_account(tmp_path, monkeypatch)
    monkeypatch.setattr(kube, "TOKEN_REREAD_S", 0.0)
    cfg = load_configuration()
    assert cfg.host == "https://127.0.0.9:6443"
    assert cfg.get_api_key_with_prefix("BearerToken") == "bearer first"
    # What the operator's kopf login reads of it, as of the library's Configuration.
    assert (cfg.ssl_ca_cert, cfg.verify_ssl, cfg.cert_file, cfg.key_file) == (
        str(sa / "ca.crt"), True, None, None)
    (sa / "token").write_text("second")  # the kubelet rotated it
    assert cfg.get_api_key_with_prefix("BearerToken") == "bearer second"


def test_in_cluster_token_is_reread_at_once_after_a_401(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the periodic re-reads the client keeps its token; a 401 makes it read the file
    again (the old token was revoked and the kubelet wrote a new one)."""
    sa = _in_cluster_service_account(tmp_path, monkeypatch)
    client = kube.KubeClient.connect()
    cfg = client.configuration
    (sa / "token").write_text("second")
    assert cfg.get_api_key_with_prefix("BearerToken") == "bearer first"  # within 60 s
    assert client._expire_token()  # what _call does on a 401
    assert cfg.get_api_key_with_prefix("BearerToken") == "bearer second"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    path = _kubeconfig(tmp_path / "kc", "{token: t0}")
    assert not kube.KubeClient.connect(path)._expire_token()  # a kubeconfig token: no file


def _node(ready: str = "True", unschedulable: bool = False, taints: tuple[str, ...] = ()) -> dict:
    return {
        "spec": {"unschedulable": unschedulable, "taints": [{"key": k} for k in taints]},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


@pytest.mark.parametrize(
    ("node", "ready", "schedulable"),
    [
        (_node(), True, True),
        (_node(ready="False"), False, False),
        (_node(ready="Unknown"), False, False),
        (_node(unschedulable=True), True, False),  # cordoned: Ready but not a place to train
        (_node(taints=("node.kubernetes.io/unreachable",)), True, False),
        (_node(taints=("node.kubernetes.io/not-ready",)), True, False),
        (_node(taints=("nvidia.com/gpu",)), True, True),  # other taints: tolerations decide
        ({"metadata": {}}, False, False),
    ],
)
def test_node_ready_and_schedulable(node: dict, ready: bool, schedulable: bool) -> None:
    assert node_ready(node) is ready
    assert node_schedulable(node) is schedulable


@pytest.mark.cluster
def test_in_cluster_client_talks_watches_and_never_imports_the_library(
        cluster: object, kube: KubeClient, namespace: str, tmp_path: Path) -> None:
    """A pod's client (token file and CA, no kubeconfig): requests, a watch and a 401 that
    re-reads the token, in a fresh interpreter that never imports `kubernetes`."""
    import os
    import subprocess
    import sys
    from urllib.parse import urlparse

    from edgetrain.kube import api_path

    kube.create(api_path("v1", "serviceaccounts", namespace), {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "probe"}})
    kube.create(api_path("rbac.authorization.k8s.io/v1", "rolebindings", namespace), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "probe"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "probe", "namespace": namespace}]})
    token = kube.create(api_path("v1", "serviceaccounts", namespace, "probe", "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}})["status"]["token"]
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("revoked")  # a 401 first: the client reads the file again
    (sa / "ca.crt").write_bytes(Path(cluster.pki.ca_crt).read_bytes())  # type: ignore[attr-defined]
    url = urlparse(kube.server)
    script = f"""
import sys, threading, pathlib
from edgetrain import kube
c = kube.KubeClient.connect()
pathlib.Path({str(sa / "token")!r}).write_text({token!r})
kube.TOKEN_REREAD_S = 3600.0
cm = kube.api_path("v1", "configmaps", {namespace!r})
c.create(cm, {{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "x"}}}})
stop = threading.Event()
for kind, obj in c.list_watch(cm, stop, fieldSelector="metadata.name=x"):
    if kind == "ADDED":
        c.patch(cm + "/x", {{"data": {{"k": "v"}}}})
    elif kind == "MODIFIED" and obj.get("data") == {{"k": "v"}}:
        break
print("kubernetes imported:", "kubernetes" in sys.modules)
"""
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": str(url.hostname),
           "KUBERNETES_SERVICE_PORT": str(url.port), ENV_SERVICE_ACCOUNT_DIR: str(sa)}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "kubernetes imported: False"
