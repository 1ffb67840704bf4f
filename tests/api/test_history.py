"""Observations of recurring jobs: the key, and a pool that skips what it cannot use."""

from __future__ import annotations

import json

import pytest

from edgetrain.api.history import EfficiencyObservation, entry_name, history_key, read_pool

KEY = history_key("resnet8-w025", "fashion-mnist", 20_000, 0.8)


def _entry(**changes: object) -> str:
    data: dict[str, object] = {
        "key": KEY,
        "model": "resnet8-w025",
        "dataset": "fashion-mnist",
        "dataset_limit": 20_000,
        "target_accuracy": 0.8,
        "batch_size": 16,
        "samples_to_accuracy": 43_008.0,
        "reached_target": True,
        "weights": "abc",
        "seed": 1,
        "job": "nightly-1",
    }
    data.update(changes)
    return json.dumps(data)


def test_the_key_is_model_target_set_and_target_accuracy() -> None:
    assert history_key("resnet8-w025", "fashion-mnist", 20_000, 0.8) == KEY
    others = [
        history_key("mobilenetv2-tiny", "fashion-mnist", 20_000, 0.8),
        history_key("resnet8-w025", "mnist", 20_000, 0.8),
        history_key("resnet8-w025", "fashion-mnist", None, 0.8),
        history_key("resnet8-w025", "fashion-mnist", 20_000, 0.82),
    ]
    assert KEY not in others and len(set(others)) == len(others)


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [
        ("{not json", "skipped", "not valid JSON"),
        ("[1, 2]", "skipped", "not a JSON object"),
        (_entry(batch_size=-4), "skipped", "batch_size"),
        (_entry(samples_to_accuracy=None), "skipped", "samples_to_accuracy"),
        (_entry(surprise=1), "skipped", "surprise"),
        (_entry(version=99), "skipped", "version 99"),
        (_entry(key="0123456789abcdef"), "skipped", "foreign"),
        (_entry(diverged=True), "excluded", "diverged"),
        (_entry(weights="other"), "excluded", "other weights"),
        (_entry(weights=None), "excluded", "other weights"),
    ],
)
def test_a_bad_entry_is_left_out_with_its_reason_and_loses_nothing_else(
    text: str, where: str, why: str
) -> None:
    entries = {"good-a.json": _entry(), "bad.json": text, "good-b.json": _entry(batch_size=64)}
    pool = read_pool(entries, KEY, "abc")
    assert sorted(o.batch_size for o in pool.used) == [16, 64]
    left_out = pool.skipped if where == "skipped" else pool.excluded
    assert list(left_out) == ["bad.json"] and why in left_out["bad.json"]
    assert pool.pairs() == [(16, 43_008.0), (64, 43_008.0)]


def test_an_observation_round_trips_and_entry_names_are_configmap_keys() -> None:
    observation = EfficiencyObservation.model_validate_json(_entry())
    assert EfficiencyObservation.model_validate_json(observation.model_dump_json()) == observation
    assert entry_name("default/nightly job#3") == "default-nightly-job-3.json"
    assert entry_name("") == "job.json"
