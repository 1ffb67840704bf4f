"""The pod-spec helpers of the operator benchmark's worker stand-in (no cluster needed)."""

from __future__ import annotations

import pytest

from edgetrain.bench.podspec import expand_vars, field_ref, format_map_file

POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                 "labels": {"app": "x", "tier": 'a"b'}, "annotations": {"edgetrain.io/f": "1"}},
    "spec": {"nodeName": "jetson-nano-0", "serviceAccountName": "default"},
}


def test_expand_vars_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert expand_vars("$(A)-$(B)-$(C)-$$(A)", env) == "1-two-$(C)-$(A)"


def test_field_refs() -> None:
    assert field_ref(POD, "metadata.name", "127.0.0.1") == "p"
    assert field_ref(POD, "spec.nodeName", "127.0.0.1") == "jetson-nano-0"
    assert field_ref(POD, "metadata.labels['app']", "127.0.0.1") == "x"
    assert field_ref(POD, "metadata.annotations['edgetrain.io/f']", "127.0.0.1") == "1"
    assert field_ref(POD, "status.podIP", "127.0.0.1") == "127.0.0.1"
    with pytest.raises(ValueError, match="unsupported"):
        field_ref(POD, "spec.bogus", "127.0.0.1")


def test_labels_file_format_matches_kubelet() -> None:
    assert format_map_file({"tier": 'a"b', "app": "x"}) == 'app="x"\ntier="a\\"b"'
