"""Operator settings from the environment and flags."""

from __future__ import annotations

import pytest

from edgetrain.operator.settings import load_settings


def test_defaults() -> None:
    s = load_settings({})
    assert s.namespaces == [] and s.retry_limit == 3 and s.pin_frequency_in_pod is False
    assert s.server_selector == {}  # a GPU server is recognised by nvidia.com/gpu (roles.py)
    assert s.estimate_parallelism == 8
    assert (s.estimator_platforms, s.trainer_platforms) == (["linux/amd64"], ["linux/arm64"])
    assert s.estimator_image.split("/")[-1].startswith("estimator:")
    assert s.trainer_image.split("/")[-1].startswith("trainer:")


def test_image_platforms_from_the_environment() -> None:
    s = load_settings({"EDGETRAIN_OPERATOR_TRAINER_PLATFORMS": "linux/arm64, linux/amd64",
                       "EDGETRAIN_OPERATOR_ESTIMATOR_PLATFORMS": "linux/arm64/v8"})
    assert s.trainer_platforms == ["linux/arm64", "linux/amd64"]
    assert s.estimator_platforms == ["linux/arm64/v8"]
    with pytest.raises(ValueError, match="EDGETRAIN_OPERATOR_TRAINER_PLATFORMS"):
        load_settings({"EDGETRAIN_OPERATOR_TRAINER_PLATFORMS": "arm64"})
    with pytest.raises(ValueError, match="EDGETRAIN_OPERATOR_ESTIMATOR_PLATFORMS"):
        load_settings({"EDGETRAIN_OPERATOR_ESTIMATOR_PLATFORMS": ""})


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
    ("TRAINER_IMAGE", "edgetrain:latest; rm -rf /"), ("ESTIMATOR_IMAGE", "-bad"),
    ("WORKER_SERVICE_ACCOUNT", "Worker SA"), ("CHECKPOINT_PVC", "../x"),
])
def test_names_that_reach_manifests_are_checked(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"EDGETRAIN_OPERATOR_{name}"):
        load_settings({f"EDGETRAIN_OPERATOR_{name}": value})
    for good in ("ghcr.io/org/edgetrain:0.3.1", "localhost:5000/edgetrain@sha256:" + "a" * 64):
        assert load_settings({"EDGETRAIN_OPERATOR_TRAINER_IMAGE": good}).trainer_image == good
        assert load_settings({"EDGETRAIN_OPERATOR_ESTIMATOR_IMAGE": good}
                             ).estimator_image == good


@pytest.mark.parametrize("path", ["/tmp", "/tmp/", "/tmp/pytest-of-root/checkpoints"])
def test_a_checkpoint_root_in_the_pods_own_tmp_is_refused(path: str) -> None:
    """Every worker pod's /tmp is its emptyDir: checkpoints there would not outlive the pod."""
    with pytest.raises(ValueError, match=r"CHECKPOINT_DIR .* under /tmp, the worker pods' own"):
        load_settings({"EDGETRAIN_OPERATOR_CHECKPOINT_DIR": path})
    for good in ("/var/lib/edgetrain/checkpoints", "/tmpfs/ck", "/data/tmp"):
        assert load_settings({"EDGETRAIN_OPERATOR_CHECKPOINT_DIR": good}).checkpoint_dir == good
