"""Against the real API server: the CRD refuses an over-long status, and what the operator writes
(`PowerAwareTrainingJobStatus.wire`) is accepted, however long the crash message."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from edgetrain.api.job_status import MAX_STRING, Phase, PowerAwareTrainingJobStatus
from edgetrain.cluster import KubeApiError, KubeClient
from tests.operator.conftest import patj_path


def test_a_5000_character_crash_message_reaches_status(
    kube: KubeClient, crds: None, namespace: str, repo_root: Path
) -> None:
    job = yaml.safe_load((repo_root / "examples" / "patj-digits.yaml").read_text())
    job["metadata"] = {"name": "long-message", "namespace": namespace}
    # A selector no node matches: an operator running in this session leaves the job Pending.
    job["spec"]["placement"] = {"nodeSelector": {"edgetrain.io/device-model": "none"}}
    kube.create(patj_path(namespace), job)
    crash = "Traceback (most recent call last):\n" + "  frame\n" * 620 + "ValueError: the cause"
    status = PowerAwareTrainingJobStatus(phase=Phase.failed, reason="EstimateFailed",
                                         message=crash)
    raw = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    path = patj_path(namespace, "long-message", "status")
    with pytest.raises(KubeApiError) as refused:  # what the operator used to send
        kube.patch(path, {"status": raw}, "merge")
    assert refused.value.code == 422
    # An operator running in this session may still write its own first status (estimating)
    # after ours, until it sees the job Failed: patch again until the terminal status stays.
    for _ in range(20):
        kube.patch(path, {"status": status.wire()}, "merge")
        time.sleep(0.5)
        stored = kube.get(patj_path(namespace, "long-message"))["status"]["message"]
        if stored.endswith("ValueError: the cause"):
            break
    assert len(stored) <= MAX_STRING and stored.endswith("ValueError: the cause"), stored
