"""Operator settings from the environment and flags."""

from __future__ import annotations

import pytest

from edgetrain.operator.settings import load_settings


def test_defaults() -> None:
    s = load_settings({})
    assert s.namespaces == [] and s.retry_limit == 3 and s.pin_frequency_in_pod is False
    assert s.server_selector == {"edgetrain.io/node-kind": "server"}
    assert s.estimate_parallelism == 8


def test_env_and_overrides() -> None:
    s = load_settings(
        {
            "EDGETRAIN_OPERATOR_NAMESPACES": "a, b",
            "EDGETRAIN_OPERATOR_SERVER_SELECTOR": "role=gpu,zone=x",
            "EDGETRAIN_OPERATOR_RETRY_LIMIT": "5",
            "EDGETRAIN_OPERATOR_PIN_FREQUENCY_IN_POD": "true",
            "EDGETRAIN_OPERATOR_CHECKPOINT_PVC": "none",
        },
        retry_limit=1,
    )
    assert s.namespaces == ["a", "b"]
    assert s.server_selector == {"role": "gpu", "zone": "x"}
    assert s.retry_limit == 1 and s.pin_frequency_in_pod and s.checkpoint_pvc is None


def test_errors_name_the_variable() -> None:
    with pytest.raises(ValueError, match="EDGETRAIN_OPERATOR_RETRY_LIMIT"):
        load_settings({"EDGETRAIN_OPERATOR_RETRY_LIMIT": "-1"})
    with pytest.raises(ValueError, match="k=v"):
        load_settings({"EDGETRAIN_OPERATOR_SERVER_SELECTOR": "gpu"})
    with pytest.raises(ValueError, match="EDGETRAIN_OPERATOR_ESTIMATE_PARALLELISM"):
        load_settings({"EDGETRAIN_OPERATOR_ESTIMATE_PARALLELISM": "0"})
    assert load_settings({"EDGETRAIN_OPERATOR_ESTIMATE_PARALLELISM": "3"}
                         ).estimate_parallelism == 3


@pytest.mark.parametrize(("name", "value"), [
    ("IMAGE", "edgetrain:latest; rm -rf /"), ("IMAGE", "-bad"),
    ("WORKER_SERVICE_ACCOUNT", "Worker SA"), ("CHECKPOINT_PVC", "../x"),
])
def test_names_that_reach_manifests_are_checked(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"EDGETRAIN_OPERATOR_{name}"):
        load_settings({f"EDGETRAIN_OPERATOR_{name}": value})
    for good in ("ghcr.io/org/edgetrain:0.3.1", "localhost:5000/edgetrain@sha256:" + "a" * 64):
        assert load_settings({"EDGETRAIN_OPERATOR_IMAGE": good}).image == good


@pytest.mark.parametrize("path", ["/tmp", "/tmp/", "/tmp/pytest-of-root/checkpoints"])
def test_a_checkpoint_root_in_the_pods_own_tmp_is_refused(path: str) -> None:
    """Every worker pod's /tmp is its emptyDir: checkpoints there would not outlive the pod."""
    with pytest.raises(ValueError, match=r"CHECKPOINT_DIR .* under /tmp, the worker pods' own"):
        load_settings({"EDGETRAIN_OPERATOR_CHECKPOINT_DIR": path})
    for good in ("/var/lib/edgetrain/checkpoints", "/tmpfs/ck", "/data/tmp"):
        assert load_settings({"EDGETRAIN_OPERATOR_CHECKPOINT_DIR": good}).checkpoint_dir == good
