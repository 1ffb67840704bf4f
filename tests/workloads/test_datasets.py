"""Offline data sets: counts, shapes, splits, the Austen reader and the missing-set error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetrain.workloads import catalog
from edgetrain.workloads import datasets as ds


@pytest.mark.parametrize(
    ("name", "total"), [("fashion-mnist", 70_000), ("mnist", 10_000), ("digits", 1_797)]
)
def test_image_sets_load_with_fixed_80_20_split(name: str, total: int) -> None:
    data = ds.load_images(name)
    assert len(data.x_train) + len(data.x_test) == total
    assert len(data.x_test) == round(total * 0.2)
    assert data.input_shape == (1, 28, 28)
    assert data.num_classes == 10
    assert data.x_train.dtype == np.float32
    assert float(data.x_train.min()) >= 0.0 and float(data.x_train.max()) <= 1.0
    assert set(np.unique(data.y_train)) == set(range(10))
    again = ds.load_images(name)
    assert np.array_equal(again.y_test, data.y_test)  # deterministic split


def test_limit_takes_a_fixed_subset() -> None:
    small = ds.load_images("fashion-mnist", limit=1000)
    assert (len(small.x_train), len(small.x_test)) == (800, 200)


def test_austen_reader_yields_the_novels() -> None:
    for name, title in [
        ("austen-emma", "EMMA"),
        ("austen-persuasion", "Persuasion"),
        ("austen-sense", "SENSE AND SENSIBILITY"),
    ]:
        text = ds.raw_text(name)
        assert text.startswith(title)
        assert 300_000 < len(text) < 1_000_000


def test_rdata_reader_on_a_handmade_record(tmp_path: Path) -> None:
    import struct
    import zlib

    def record(lines: list[str | None]) -> bytes:
        body = b"X\n" + struct.pack(">iii", 3, 0x040000, 0x030500)
        body += struct.pack(">i", 5) + b"UTF-8" + struct.pack(">ii", 16, len(lines))
        for line in lines:
            if line is None:
                body += struct.pack(">ii", 9, -1)
            else:
                raw = line.encode()
                body += struct.pack(">ii", 0x00040009, len(raw)) + raw
        return struct.pack(">i", len(body)) + zlib.compress(body)

    path = tmp_path / "Rdata.rdb"
    path.write_bytes(record(["a", None, "bc"]) + record(["z"]))
    assert ds.read_rdata_character_vectors(path) == [["a", None, "bc"], ["z"]]


@pytest.mark.parametrize("name", ["moby-dick", "sherlock-holmes", "tom-sawyer", "brown"])
def test_text_sets_are_cleaned_to_the_vocabulary(name: str) -> None:
    data = ds.load_text(name)
    assert len(data.train) > 300_000
    assert abs(len(data.test) / (len(data.train) + len(data.test)) - 0.1) < 0.001
    assert int(data.train.max()) < len(ds.VOCABULARY)
    assert "Project Gutenberg-tm" not in ds.raw_text(name)[-5000:]


def test_brown_tags_are_stripped() -> None:
    assert ds.raw_text("brown").startswith("The Fulton County Grand Jury said Friday")


def test_vocabulary_is_the_papers() -> None:
    assert len(ds.VOCABULARY) == 96
    assert ds.clean_text("caf\u00e9 \u201cok\u201d\r\n\tx") == 'cafe "ok"\n x'


def test_missing_set_says_run_make_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGETRAIN_DATA_DIR", str(tmp_path))
    ds._mnist.cache_clear()
    try:
        with pytest.raises(ds.DatasetMissingError, match=r"Run `make data`"):
            ds.load_images("mnist")
    finally:
        ds._mnist.cache_clear()


def test_digits_ship_with_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a data folder (a pod on a real node) digits loads from the package's copy, the
    very file `make data` installs."""
    installed = catalog.data_dir() / catalog.DATASETS["digits"].data_path
    monkeypatch.setenv("EDGETRAIN_DATA_DIR", str(tmp_path))
    ds._digits.cache_clear()
    try:
        assert catalog.DATASETS["digits"].installed()
        data = ds.load_images("digits")
        assert len(data.x_train) + len(data.x_test) == 1_797
    finally:
        ds._digits.cache_clear()
    packaged = catalog.PACKAGE_DATA / "sklearn-digits.csv.gz"
    monkeypatch.delenv("EDGETRAIN_DATA_DIR")
    if installed.exists():
        assert installed.read_bytes() == packaged.read_bytes()


def test_unknown_set_lists_the_known_ones() -> None:
    with pytest.raises(ds.UnknownDatasetError, match="image sets: fashion-mnist"):
        ds.load_images("cifar10")
    with pytest.raises(ds.UnknownDatasetError, match="text sets: austen-emma"):
        ds.load_text("shakespeare")
