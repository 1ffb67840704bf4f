"""Helpers shared by tests that run the `edgetrain` command or profile a fast twin."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.forkserver import shared_fork_server


def skip_here_fail_in_ci(reason: str | None, in_ci: str, here: str) -> None:
    """Nothing where `reason` is None; else a failure in CI (`make setup` provides what real
    nodes, kind or images need there) and a skip saying why anywhere else."""
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{in_ci}: {reason}")
    pytest.skip(f"{here}: {reason}")


def project_image_up_to_date(name: str) -> None:
    """Project image `name` built from this tree, as `make images-core` builds it (a no-op when
    its stamp names these sources): an image from older sources would test older code."""
    from edgetrain.cluster.images import podman_ref

    root = Path(__file__).resolve().parents[1]
    # The Makefile's registry, which `podman_ref` tries first (a stale image there would win).
    env = dict(os.environ, REGISTRY="ghcr.io/edgetrain", PYTHON=sys.executable,
               CONTAINERS_CONF=str(root / "images" / "containers.conf"))
    built = subprocess.run(["bash", str(root / "scripts" / "build-images.sh"), name],
                           capture_output=True, text=True, env=env, timeout=2400)
    assert built.returncode == 0, f"image build failed:\n{built.stderr[-6000:]}"
    assert podman_ref(name, "0.1.0") is not None, built.stdout


# Profiling options that keep a twin measurement to a fraction of a second per point.
FAST_PROFILE_ARGS = [
    "--minibatches",
    "2",
    "--min-window",
    "0.3",
    "--stabilize-window",
    "0.3",
    "--stabilize-timeout",
    "2",
    "--sample-interval",
    "0.02",
]


def run_edgetrain(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m edgetrain ARGS` as a user would; never raises on a non-zero exit.
    Forked from this process's fork server, as virtual nodes start their pods (each fresh
    interpreter spent ~6 s of CPU importing torch); an `env` whose interpreter settings differ
    starts a new interpreter instead."""
    argv = [sys.executable, "-m", "edgetrain", *args]
    environ = dict(os.environ if env is None else env)
    server = shared_fork_server(argv[:3])
    if not server.runs(argv, environ):
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    with tempfile.TemporaryDirectory(prefix="edgetrain-run-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        code = server.start(argv, env=environ, cwd=Path.cwd(), log_path=out, preexec=None,
                            stderr_path=err).wait()
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())


_THREAD = threading.local()


def http_get(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.get` on one client per thread: `httpx.get` makes a client per call, and with it
    a TLS context that loads the CA bundle (about 5 ms of CPU; 15 % of a fault worker's own
    CPU went there, in polls of plain-HTTP endpoints). No keep-alive: servers restart."""
    client = getattr(_THREAD, "client", None)
    if client is None:
        client = _THREAD.client = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
    return client.get(url, **kwargs)


def pod_log(kube: Any, pod: dict[str, Any], container: str) -> str:
    """A container's log from its node's kubelet (`kubectl logs`), or why there is none."""
    from edgetrain.cluster import api_path

    meta = pod["metadata"]
    try:
        return str(kube.get_text(api_path("v1", "pods", meta["namespace"], meta["name"], "log")
                                 + f"?container={container}"))
    except Exception as exc:  # a diagnostic: say why instead of failing
        return f"<no log of {meta['name']}/{container}: {exc}>"
