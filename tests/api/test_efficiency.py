"""Efficiency-vector contract: r consistency and precise errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api import EfficiencyVector, InputError, parse_efficiency_json, read_efficiency
from edgetrain.api.efficiency import write_efficiency


def _doc(**overrides: Any) -> str:
    doc: dict[str, Any] = {
        "model": "resnet18",
        "dataset": "cifar10",
        "target_accuracy": 0.87,
        "batch_sizes": [16, 32, 64],
        "samples_to_accuracy": [20000.0, 30000.0, 40000.0],
        "r": [0.5, 0.75, 1.0],
    }
    doc.update(overrides)
    return json.dumps(doc)


def test_good_vector() -> None:
    vector = parse_efficiency_json(_doc())
    assert vector.r_by_batch_size() == {16: 0.5, 32: 0.75, 64: 1.0}


def test_from_samples_computes_r_and_round_trips(tmp_path: Path) -> None:
    vector = EfficiencyVector.from_samples(
        model="m",
        dataset="d",
        target_accuracy=0.9,
        batch_sizes=[4, 8, 16],
        samples_to_accuracy=[30.0, None, 60.0],
    )
    assert vector.r == [0.5, None, 1.0]
    write_efficiency(tmp_path / "e.json", vector)
    assert read_efficiency(tmp_path / "e.json") == vector
    assert vector.samples_by_batch_size() == {4: 30.0, 16: 60.0}


def _error(text: str) -> InputError:
    with pytest.raises(InputError) as info:
        parse_efficiency_json(text, "eff.json")
    return info.value


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("{", None, "not valid JSON"),
        ("[1, 2]", None, "expected a JSON object, got list"),
        (_doc(r=[0.5, 0.75, 1.2]), "r[2]", "less than or equal to 1"),
        (_doc(r=[0.0, 0.75, 1.0]), "r[0]", "greater than 0"),
        (
            _doc(r=[0.5, 0.7, 1.0]),
            None,
            "r[1] (batch size 32) is 0.7 but samples_to_accuracy gives",
        ),
        (_doc(r=[0.5, 0.75]), None, "r has 2 entries but batch_sizes has 3"),
        (_doc(batch_sizes=[16, 16, 64]), None, "batch_sizes repeats [16]"),
        (_doc(batch_sizes=[16, -32, 64]), "batch_sizes[1]", "greater than 0"),
        (
            _doc(samples_to_accuracy=[20000.0, None, 40000.0]),
            None,
            "r[1] (batch size 32) must be null exactly when samples_to_accuracy is",
        ),
        (
            _doc(samples_to_accuracy=[None, None, None], r=[None, None, None]),
            None,
            "no batch size reached the target accuracy",
        ),
        (_doc(target_accuracy=1.5), "target_accuracy", "less than or equal to 1"),
        (_doc(target_accuracy=0), "target_accuracy", "greater than 0"),
        (_doc(model=""), "model", "at least 1 character"),
        (_doc(extra=1), "extra", "Extra inputs are not permitted"),
        (json.dumps({"model": "m"}), "dataset", "Field required"),
    ],
)
def test_bad_efficiency_names_the_field(text: str, field: str | None, fragment: str) -> None:
    err = _error(text)
    assert err.field == field
    assert fragment in str(err)
    assert str(err).startswith("eff.json")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_efficiency(tmp_path / "none.json")


def test_device_and_precision_are_optional() -> None:
    old = parse_efficiency_json(_doc())
    assert old.device is None and old.precision is None
    new = parse_efficiency_json(_doc(device="cuda:0", precision="bf16"))
    assert (new.device, new.precision) == ("cuda:0", "bf16")
    assert json.loads(new.model_dump_json())["device"] == "cuda:0"
