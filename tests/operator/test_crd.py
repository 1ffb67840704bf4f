"""The generated CRD: golden files, validation ranges, CEL immutability, printer columns."""

from __future__ import annotations

from pathlib import Path

import yaml

from edgetrain.api.crd import CRD_FILE, IMMUTABLE_ONCE_STARTED, crd, spec_schema
from edgetrain.api.crd_files import crd_files
from edgetrain.api.job import load_job

REPO = Path(__file__).resolve().parents[2]


def test_committed_crds_equal_generated() -> None:
    """`make crds` output is committed in crds/ and the chart's crds/ (golden test)."""
    for folder in (REPO / "crds", REPO / "charts/edgetrain/crds"):
        for name, text in crd_files().items():
            path = folder / name
            assert path.is_file(), f"{path} missing: run `make crds`"
            assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run `make crds`"


def test_spec_ranges_and_defaults() -> None:
    props = spec_schema()["properties"]
    limit = props["powerLimitWatts"]
    assert limit["minimum"] == 0 and limit["exclusiveMinimum"] is True and limit["nullable"]
    acc = props["targetAccuracy"]
    assert acc["exclusiveMinimum"] is True and acc["maximum"] == 1 and "exclusiveMaximum" not in acc
    sizes = props["batchSizes"]
    assert sizes["minItems"] == 1 and sizes["x-kubernetes-list-type"] == "set"
    assert sizes["items"]["minimum"] == 0 and sizes["items"]["exclusiveMinimum"] is True
    assert sizes["default"] == [4, 8, 16, 32, 64, 128]
    assert props["strategy"]["properties"]["profiling"]["default"] == "frontier"
    assert props["optimizer"]["properties"]["name"]["enum"] == ["adam", "adamw", "sgd"]
    assert set(spec_schema()["required"]) >= {"model", "dataset", "proxyDataset", "targetAccuracy"}


def _walk(node: object) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    if isinstance(node, dict):
        out.append(node)
        for value in node.values():
            out += _walk(value)
    elif isinstance(node, list):
        for value in node:
            out += _walk(value)
    return out


def test_schema_is_structural() -> None:
    """No constructs the API server rejects in a structural schema."""
    version = crd()["spec"]["versions"][0]
    for node in _walk(version["schema"]["openAPIV3Schema"]):
        for banned in ("$ref", "anyOf", "title", "$defs", "const"):
            assert banned not in node
        assert node.get("additionalProperties") is not False
        if "properties" in node:
            assert node.get("type") == "object"


def test_names_status_columns_and_cel() -> None:
    obj = crd()
    names = obj["spec"]["names"]
    assert names["shortNames"] == ["patj"] and names["kind"] == "PowerAwareTrainingJob"
    version = obj["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["GPU MHz"] == ".status.selection.gpuFrequencyMHz"
    assert {"Batch", "Limit W", "Predicted s", "Actual s", "Age"} <= set(columns)
    (rule,) = version["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert "oldSelf.status.phase != 'Pending'" in rule["rule"]
    for field in IMMUTABLE_ONCE_STARTED:
        assert f"self.spec.{field} == oldSelf.spec.{field}" in rule["rule"]
    assert "powerLimitWatts" not in rule["rule"]  # the limit may change while training


def test_examples_are_valid_jobs() -> None:
    """Every example loads with the spec model (what `edgetrain run` reads, too)."""
    paths = [*sorted((REPO / "examples").glob("patj-*.yaml")), REPO / "examples/demo-nano.yaml"]
    assert len(paths) >= 2
    for path in paths:
        spec = load_job(path)
        assert spec.batch_sizes
        assert yaml.safe_load(path.read_text())["kind"] == "PowerAwareTrainingJob"


def test_crd_file_name() -> None:
    assert CRD_FILE == "edgetrain.io_powerawaretrainingjobs.yaml"
