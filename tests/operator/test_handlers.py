"""The status the handlers write: a minimal patch, remembered only once the API server accepted
it, and the per-job memory released when a job is final or deleted."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from edgetrain.api.job_status import Phase
from edgetrain.cluster import KubeClient
from edgetrain.kube import ENV_SERVICE_ACCOUNT_DIR
from edgetrain.operator import handlers
from edgetrain.operator.handlers import merge_diff
from edgetrain.operator.reconcile import Indexes, Reconciler
from edgetrain.operator.settings import load_settings
from tests.operator.conftest import patj_path


def test_merge_diff() -> None:
    old = {"phase": "Training", "attempts": {"estimate": 1, "nextRetryAt": 5.0},
           "conditions": [{"type": "A"}], "message": "x"}
    new = {"phase": "Training", "attempts": {"estimate": 1}, "conditions": [{"type": "A"}],
           "reason": "r"}
    assert merge_diff(old, new) == {"attempts": {"nextRetryAt": None}, "message": None,
                                    "reason": "r"}
    assert merge_diff(new, new) == {}


def _job(kube: KubeClient, namespace: str, name: str, repo_root: Path) -> dict[str, Any]:
    body = yaml.safe_load((repo_root / "examples" / "patj-digits.yaml").read_text())
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["placement"] = {"nodeSelector": {"edgetrain.io/device-model": "none"}}
    made = kube.create(patj_path(namespace), body)
    made["metadata"]["namespace"] = namespace
    return made


def test_status_is_remembered_only_once_written_and_released_on_delete(
    kube: KubeClient, crds: None, namespace: str, repo_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Against the real API server: a refused status write is logged and not remembered (the
    next tick starts from the stored status again); an accepted one is remembered until the job
    is deleted."""
    # No node is a GPU server here, so the estimate Job this creates never runs.
    rec = Reconciler(kube, load_settings({}, server_selector={"edgetrain.io/node-kind": "none"}))
    made = _job(kube, namespace, "memo", repo_root)
    uid = made["metadata"]["uid"]
    step = handlers.reconcile_and_write(rec, made, Indexes())
    assert step.status.phase is Phase.estimating
    stored = kube.get(patj_path(namespace, "memo"))["status"]
    assert stored["phase"] == "EstimatingEfficiency"
    assert uid in handlers._written and handlers.memory_size() >= 1

    # The same job under a name the API server does not know: the status write is refused.
    ghost = {**made, "metadata": {**made["metadata"], "name": "ghost", "uid": "ghost-uid"}}
    with caplog.at_level(logging.WARNING, logger="edgetrain.operator"):
        step = handlers.reconcile_and_write(rec, ghost, Indexes())
    assert step.status.phase is Phase.estimating  # decided, but not written …
    assert "ghost-uid" not in handlers._written  # … so not remembered as written
    assert "status not written (HTTP 404" in caplog.text

    kube.delete(patj_path(namespace, "memo"))
    asyncio.run(handlers.on_event(type="DELETED", body=kopf.Body(made)))
    asyncio.run(handlers.on_event(type="DELETED", body=kopf.Body(ghost)))
    assert uid not in handlers._written and uid not in handlers._job_locks
    assert "ghost-uid" not in handlers._job_locks


def test_final_jobs_release_their_memory() -> None:
    handlers._written["f"] = ({}, {})
    handlers._job_lock("f")
    asyncio.run(handlers.on_event(type="MODIFIED", body=kopf.Body({"metadata": {"uid": "f"},
                                                      "status": {"phase": "Succeeded"}})))
    assert "f" not in handlers._written and "f" not in handlers._job_locks
    handlers._written["r"] = ({}, {})
    asyncio.run(handlers.on_event(type="MODIFIED", body=kopf.Body({"metadata": {"uid": "r"},
                                                      "status": {"phase": "Training"}})))
    assert "r" in handlers._written  # a running job keeps it
    handlers.forget("r")


@pytest.fixture
def in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pod's ServiceAccount directory with token A, and the in-cluster environment."""
    (tmp_path / "token").write_text("token-a")
    (tmp_path / "ca.crt").write_text("not read until a connection")
    monkeypatch.setenv(ENV_SERVICE_ACCOUNT_DIR, str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(handlers, "_last_login_token", {})
    return tmp_path


def _login_while_rotating(in_a_pod: Path) -> kopf.ConnectionInfo:
    """A second login while the kubelet writes `token-b` into the token file 1 s from now."""
    rotate = threading.Timer(1.0, (in_a_pod / "token").write_text, ("token-b",))
    rotate.start()
    try:
        return handlers.login()
    finally:
        rotate.cancel()


def test_login_after_a_401_waits_for_the_rotated_token(in_a_pod: Path) -> None:
    """kopf asks again after a 401 and refuses the token it was refused (the operator would
    exit): the second login returns only once the kubelet has rotated the file."""
    assert handlers.login().token == "token-a"
    info = _login_while_rotating(in_a_pod)
    assert (info.scheme, info.token) == ("Bearer", "token-b")


def test_login_waits_through_a_token_file_being_rewritten(in_a_pod: Path) -> None:
    """A token file read while it is rewritten (empty) is not a rotation: the login waits for
    the new token instead of giving kopf no credentials (the race `write_text` made above)."""
    assert handlers.login().token == "token-a"
    (in_a_pod / "token").write_text("")
    info = _login_while_rotating(in_a_pod)
    assert (info.scheme, info.token) == ("Bearer", "token-b")


def test_login_gives_the_same_token_back_when_none_comes(
        in_a_pod: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No rotation within the wait: the same token, and kopf's own LoginError decides."""
    monkeypatch.setattr(handlers, "TOKEN_ROTATION_WAIT_S", 0.6)
    assert handlers.login().token == "token-a"
    assert handlers.login().token == "token-a"


def test_a_body_several_writes_old_reads_as_the_newest_write() -> None:
    """kopf may deliver a job's status a few writes late: a reconcile from any status our
    writes replaced starts from the newest one (it would else repeat transitions, or write an
    old Training message over a Failed job's)."""
    a, b, c = {"phase": "Training", "message": "a"}, {"phase": "Training", "message": "b"}, {
        "phase": "Failed", "message": "c"}
    handlers._remember("chain", a, b)
    handlers._remember("chain", b, c)
    befores, newest = handlers._written["chain"]
    assert a in befores and b in befores and newest == c
    for _ in range(handlers.MEMO_DEPTH + 2):
        handlers._remember("chain", c, c)
    assert len(handlers._written["chain"][0]) == handlers.MEMO_DEPTH  # bounded
    handlers.forget("chain")
    assert "chain" not in handlers._written
