"""Pod-spec translation rules (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.cluster.boards import parse_counts, profile
from edgetrain.cluster.podspec import (
    PathMap,
    expand_vars,
    field_ref,
    format_map_file,
    parse_quantity,
    pod_phase,
    resolve_command,
    resource_field,
    should_restart,
)

POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                 "labels": {"app": "x", "tier": 'a"b'}, "annotations": {"edgetrain.io/f": "1"}},
    "spec": {"nodeName": "vn-jetson-nano-0", "serviceAccountName": "default"},
}


def test_expand_vars_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert expand_vars("$(A)-$(B)-$(C)-$$(A)", env) == "1-two-$(C)-$(A)"


def test_field_refs() -> None:
    assert field_ref(POD, "metadata.name", "127.0.0.1") == "p"
    assert field_ref(POD, "spec.nodeName", "127.0.0.1") == "vn-jetson-nano-0"
    assert field_ref(POD, "metadata.labels['app']", "127.0.0.1") == "x"
    assert field_ref(POD, "metadata.annotations['edgetrain.io/f']", "127.0.0.1") == "1"
    assert field_ref(POD, "status.podIP", "127.0.0.1") == "127.0.0.1"
    with pytest.raises(ValueError, match="unsupported"):
        field_ref(POD, "spec.bogus", "127.0.0.1")


def test_labels_file_format_matches_kubelet() -> None:
    assert format_map_file({"tier": 'a"b', "app": "x"}) == 'app="x"\ntier="a\\"b"'


def test_path_map_rewrites_mount_paths_only_at_path_boundaries(tmp_path: Path) -> None:
    container = {"volumeMounts": [{"name": "v", "mountPath": "/etc/podinfo"},
                                  {"name": "w", "mountPath": "/etc/podinfo/deep/"}],
                 "workingDir": "/work"}
    paths = PathMap.for_container(tmp_path, container)
    root = str(tmp_path)
    assert paths.translate("/etc/podinfo/labels") == f"{root}/etc/podinfo/labels"
    assert paths.translate("cat /etc/podinfo/deep/x") == f"cat {root}/etc/podinfo/deep/x"
    assert paths.translate("--out=/work") == f"--out={root}/work"
    assert paths.translate("/etc/podinfox") == "/etc/podinfox"
    assert paths.translate("/usr/etc/podinfo") == "/usr/etc/podinfo"
    assert paths.host("/dev/termination-log") == tmp_path / "dev" / "termination-log"
    assert paths.translate("open('/dev/termination-log')") == (
        f"open('{root}/dev/termination-log')")


def test_resolve_command_maps_known_executables() -> None:
    exe = {"edgetrain": ["/venv/python", "-m", "edgetrain"]}
    assert resolve_command(["edgetrain", "device"], ["info"], exe) == [
        "/venv/python", "-m", "edgetrain", "device", "info"]
    assert resolve_command([], ["sh", "-c", "true"], exe) == ["sh", "-c", "true"]
    with pytest.raises(ValueError, match="image entrypoint"):
        resolve_command([], [], exe)


@pytest.mark.parametrize(
    ("policy", "codes", "restarting", "phase"),
    [
        ("Never", [0, 0], False, "Succeeded"),
        ("Never", [0, 3], False, "Failed"),
        ("Never", [0, None], False, "Running"),
        ("OnFailure", [0], True, "Running"),
        ("Always", [0], False, "Running"),
    ],
)
def test_pod_phase(policy: str, codes: list[int | None], restarting: bool, phase: str) -> None:
    assert pod_phase(policy, codes, restarting) == phase


def test_restart_rules() -> None:
    assert should_restart("Always", 0)
    assert should_restart("OnFailure", 1) and not should_restart("OnFailure", 0)
    assert not should_restart("Never", 1)


def test_quantities_and_resource_fields() -> None:
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("4Gi") == 4 * 2**30
    container = {"resources": {"limits": {"cpu": "1500m"}}}
    assert resource_field(container, "limits.cpu", "1", {"cpu": "4"}) == "2"
    assert resource_field({}, "limits.memory", "1Mi", {"memory": "4Gi"}) == "4096"


def test_board_counts_and_profiles() -> None:
    assert parse_counts("nano=2,orin=1") == {"jetson-nano": 2, "jetson-orin-nano": 1}
    with pytest.raises(ValueError, match="BOARD=N"):
        parse_counts("nano")
    with pytest.raises(ValueError, match="unknown board"):
        parse_counts("tegra=1")
    nano = profile("nano")
    labels = nano.labels("n0")
    assert labels["edgetrain.io/device-model"] == "jetson-nano"
    assert labels["edgetrain.io/l4t"] == "32.7.1"
    assert labels["kubernetes.io/arch"] == "arm64"
    assert nano.annotations()["edgetrain.io/gpu-frequencies-hz"].startswith("76800000,")


def test_path_map_rewrites_once_when_the_pod_root_is_under_a_mount() -> None:
    """The pod root lives under /tmp and the container mounts an emptyDir at /tmp: a rewritten
    path must not be rewritten again (the in-cluster operator once got a doubled path)."""
    root = Path("/tmp/vnodes/n/pods/p/root")
    container = {"volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                  {"name": "sa", "mountPath": "/var/run/secrets/sa"}]}
    paths = PathMap.for_container(root, container)
    assert paths.translate("/var/run/secrets/sa") == f"{root}/var/run/secrets/sa"
    assert paths.translate("/tmp/x /var/run/secrets/sa/token") == (
        f"{root}/tmp/x {root}/var/run/secrets/sa/token")
