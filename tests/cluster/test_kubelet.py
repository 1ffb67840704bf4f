"""What a kubelet gives users beyond running pods: `kubectl logs` through the API server, one
address per node, readiness probes and renewed ServiceAccount tokens."""

from __future__ import annotations

import ipaddress
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from edgetrain.cluster import KubeClient, LocalCluster, VNodeAgent, api_path, binaries
from edgetrain.cluster import volumes as volumes_module
from edgetrain.cluster.kubelet import http_probe, tail_bytes
from edgetrain.cluster.pki import issue_serving_pair

Obj = dict[str, Any]
NANO = "vn-jetson-nano-0"


def kubectl(cluster: LocalCluster, *args: str, timeout_s: float = 60,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.kubectl()), "--kubeconfig", str(cluster.kubeconfig),
                           *args], capture_output=True, text=True, timeout=timeout_s)


def _pod(name: str, script: str, restart: str = "Never", **extra: Any) -> Obj:
    container: Obj = {"name": "main", "image": "edgetrain:dev",
                      "command": ["python", "-u", "-c", script], **extra}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "nodeName": NANO, "containers": [container]}}


def _wait(kube: KubeClient, ns: str, name: str, pred: Any, what: str, timeout_s: float = 60,
          ) -> Obj:
    return kube.wait_for(api_path("v1", "pods", ns, name), pred, timeout_s=timeout_s, what=what)


def test_every_node_has_its_own_address(vnodes: VNodeAgent, kube: KubeClient) -> None:
    addresses = []
    for node in vnodes.nodes:
        obj = kube.get(api_path("v1", "nodes", name=node.name))
        (ip,) = [a["address"] for a in obj["status"]["addresses"] if a["type"] == "InternalIP"]
        assert ipaddress.ip_address(ip).is_loopback and ip != "127.0.0.1"
        assert obj["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
        addresses.append(ip)
    assert len(set(addresses)) == len(addresses)


def test_kubectl_logs_tail_follow_previous_and_container(
        cluster: LocalCluster, vnodes: VNodeAgent, kube: KubeClient, namespace: str) -> None:
    kube.create(api_path("v1", "pods", namespace), _pod(
        "talker", "import time\nfor i in range(6):\n    print('line', i)\n    time.sleep(0.5)"))
    # -f streams while the container runs and ends when it exits.
    follow = kubectl(cluster, "-n", namespace, "logs", "-f", "talker", "--pod-running-timeout=60s",
                     timeout_s=90)
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout.splitlines() == [f"line {i}" for i in range(6)]
    _wait(kube, namespace, "talker", lambda p: p["status"].get("phase") == "Succeeded", "done")
    tail = kubectl(cluster, "-n", namespace, "logs", "talker", "--tail=2", "-c", "main")
    assert tail.stdout.splitlines() == ["line 4", "line 5"], tail.stderr
    wrong = kubectl(cluster, "-n", namespace, "logs", "talker", "-c", "nope")
    assert wrong.returncode != 0 and "nope" in wrong.stderr

    # --previous shows the run before the last restart.
    kube.create(api_path("v1", "pods", namespace), _pod(
        "crasher", "import os,sys\nprint('run of', os.getpid())\nsys.exit(3)",
        restart="OnFailure"))
    pod = _wait(kube, namespace, "crasher",
                lambda p: any(c.get("restartCount", 0) >= 2
                              for c in p["status"].get("containerStatuses", [])), "restarted")
    assert pod["status"]["containerStatuses"][0]["restartCount"] >= 2
    prev = kubectl(cluster, "-n", namespace, "logs", "crasher", "--previous")
    assert prev.returncode == 0, prev.stderr
    assert prev.stdout.startswith("run of ")


def test_logs_need_the_api_servers_client_certificate(vnodes: VNodeAgent) -> None:
    import ssl
    import urllib.request

    node = vnodes.nodes[0]
    assert node.kubelet is not None
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with pytest.raises(OSError):  # handshake refused without a client certificate
        urllib.request.urlopen(f"https://{node.address}:{node.kubelet.port}/healthz",
                               timeout=5, context=ctx)


def test_tail_and_limit_follow_kubelet_order() -> None:
    data = b"a\nb\nc\n"
    assert tail_bytes(data, 2, None) == b"b\nc\n"
    assert tail_bytes(data, 0, None) == b""
    assert tail_bytes(data, None, 3) == b"a\nb"
    assert tail_bytes(data, 2, 2) == b"b\n"


def test_readiness_probe_gates_ready(vnodes: VNodeAgent, kube: KubeClient,
                                    namespace: str) -> None:
    node = next(n for n in vnodes.nodes if n.name == NANO)
    script = ("import http.server, os, time\ntime.sleep(3)\n"
              "http.server.HTTPServer((os.environ['POD_IP'], int(os.environ['PORT'])),"
              " http.server.SimpleHTTPRequestHandler).serve_forever()")
    port = 18000 + int(time.time()) % 1000
    kube.create(api_path("v1", "pods", namespace), _pod(
        "served", script, restart="Always",
        env=[{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
             {"name": "PORT", "value": str(port)}],
        ports=[{"name": "http", "containerPort": port}],
        readinessProbe={"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}))
    running = _wait(kube, namespace, "served",
                    lambda p: p["status"].get("phase") == "Running", "Running")
    assert running["status"]["podIP"] == node.address
    ready = {c["type"]: c["status"] for c in running["status"]["conditions"]}
    assert ready["Ready"] == "False"  # the server sleeps 3 s before it listens
    _wait(kube, namespace, "served",
          lambda p: any(c["type"] == "Ready" and c["status"] == "True"
                        for c in p["status"]["conditions"]), "Ready", timeout_s=30)


def test_projected_token_is_renewed_before_it_expires(
        vnodes: VNodeAgent, kube: KubeClient, namespace: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(volumes_module, "TOKEN_REFRESH_FRACTION", 0.005)  # 3 s of 600 s
    pod = _pod("holder", "import time\ntime.sleep(60)")
    pod["spec"]["volumes"] = [{"name": "tok", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 600}}]}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "tok", "mountPath": "/var/tok"}]
    kube.create(api_path("v1", "pods", namespace), pod)
    _wait(kube, namespace, "holder", lambda p: p["status"].get("phase") == "Running", "Running")
    node = next(n for n in vnodes.nodes if n.name == NANO)
    (token_file,) = Path(node.dir, "pods").glob(f"{namespace}_holder_*/volumes/tok/token")
    first = token_file.read_text()
    deadline = time.monotonic() + 30
    while token_file.read_text() == first:
        assert time.monotonic() < deadline, "token not renewed"
        time.sleep(0.5)
    review = kube.create("/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token_file.read_text()}})
    assert review["status"]["authenticated"] is True
    kube.delete(api_path("v1", "pods", namespace, "holder"))


@pytest.mark.parametrize("status", [200, 302, 500])
def test_an_https_probe_takes_a_self_signed_certificate(tmp_path: Path, status: int) -> None:
    """As the kubelet's httpGet probe: HTTPS without verifying the certificate (one
    self-signed here), 200 to 399 pass; a plain HTTP probe at the same server's port fails."""
    crt, key = issue_serving_pair("probe", ["127.0.0.1"], None)
    (tmp_path / "tls.crt").write_bytes(crt)
    (tmp_path / "tls.key").write_bytes(key)

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert http_probe("127.0.0.1", port, "/healthz", "HTTPS") is (status < 400)
        assert http_probe("127.0.0.1", port, "/healthz", "HTTP") is False
    finally:
        server.shutdown()


def test_an_address_released_twice_closes_nothing_else(tmp_path: Path) -> None:
    """A node stopped twice releases its loopback claim twice: the second release must not
    close the descriptor that took the claim's number meanwhile. In a fresh interpreter, where
    no other thread takes that number first."""
    code = (
        "import os, sys, pathlib\n"
        "from edgetrain.cluster.kubelet import AddressClaim\n"
        "d = pathlib.Path(sys.argv[1])\n"
        "claim = AddressClaim(d)\n"
        "number = claim._fd\n"
        "claim.release()\n"
        "other = os.open(d / 'other', os.O_RDWR | os.O_CREAT)\n"
        "assert other == number, (other, number)\n"
        "claim.release()\n"
        "os.fstat(other)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
