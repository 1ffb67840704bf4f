"""Every check of a job that needs no training: names, budgets and their combinations.

Torch-free on purpose: `edgetrain run` calls it before any work and the operator at Pending.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from edgetrain.api.errors import InputError
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.device.sim.boards import BOARDS
from edgetrain.workloads.catalog import DATASETS, MODELS, DatasetInfo, data_dir


class _Bad(Protocol):
    """The `bad(field, message, hint)` callback that collects problems."""

    def __call__(self, field: str, message: str, hint: str | None = None) -> None: ...


def _known(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(sorted(names))


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _sets_of_kind(kind: str) -> str:
    return _known([n for n, d in DATASETS.items() if d.kind == kind])


def device_board(device: str) -> str | None:
    """The simulated board of `placement.device` ('sim:<board>'), None for 'local'."""
    return None if device == "local" else device.removeprefix("sim:")


def job_problems(
    spec: PowerAwareTrainingJobSpec,
    source: str | Path = "job",
    *,
    prefix: str = "spec.",
    standalone: bool = True,
) -> list[InputError]:
    """Everything wrong with `spec` that is cheap to find, each naming its field.

    `standalone`: the job runs here (`edgetrain run`): local files, the device and the
    strategies the pipeline supports are checked too; the operator checks without them.
    """
    out: list[InputError] = []

    def bad(field: str, message: str, hint: str | None = None) -> None:
        out.append(InputError(source, message, field=prefix + field, hint=hint))

    model_kind = MODELS.get(spec.model.architecture)
    if model_kind is None:
        bad(
            "model.architecture",
            f"unknown model {spec.model.architecture!r}; known: {_known(list(MODELS))}",
        )
    sets: dict[str, DatasetInfo] = {}
    named = [
        ("dataset.name", spec.dataset.name, spec.dataset.limit),
        ("proxyDataset.name", spec.proxy_dataset.name, spec.proxy_dataset.limit),
    ]
    if spec.model.pretrain is not None:
        named.append(("model.pretrain.dataset", spec.model.pretrain.dataset, None))
    for field, name, _limit in named:
        info = DATASETS.get(name)
        if info is None:
            bad(field, f"unknown data set {name!r}; known: {_known(list(DATASETS))}")
        else:
            sets[field] = info
    for field, info in sets.items():
        if model_kind is not None and info.kind != model_kind:
            bad(
                field,
                f"{spec.model.architecture} is {_a(model_kind)} model but {info.name!r} is"
                f" {_a(info.kind)} data set",
                hint=f"pick {_a(model_kind)} set: {_sets_of_kind(model_kind)}",
            )
    target, proxy = sets.get("dataset.name"), sets.get("proxyDataset.name")
    if model_kind is None and target and proxy and target.kind != proxy.kind:
        bad(
            "proxyDataset.name",
            f"the proxy {proxy.name!r} is {_a(proxy.kind)} set but the target {target.name!r}"
            f" is {_a(target.kind)} set; r from one says nothing about the other",
        )
    for field, name, limit in named[:2]:
        info = DATASETS.get(name)
        if info is None:
            continue
        train = info.train_size(limit)
        too_big = [b for b in spec.batch_sizes if b > train]
        if too_big:
            bad(
                "batchSizes",
                f"batch size(s) {too_big} exceed the {train} training samples of {name!r}"
                f" ({field.split('.')[0]}{'' if limit is None else f', limit {limit}'})",
                hint="use smaller batch sizes or a larger data set/limit",
            )
            break
    budget = spec.budget
    biggest = max(spec.batch_sizes)
    if budget.estimate_samples < biggest:
        bad(
            "budget.estimateSamples",
            f"{budget.estimate_samples} is less than one minibatch of the largest batch size"
            f" ({biggest})",
            hint=f"raise it to at least {biggest}, typically 20+ minibatches",
        )
    if budget.train_samples < biggest:
        bad(
            "budget.trainSamples",
            f"{budget.train_samples} is less than one minibatch of the largest batch size"
            f" ({biggest})",
        )
    if budget.eval_interval_samples > budget.estimate_samples:
        bad(
            "budget.evalIntervalSamples",
            f"{budget.eval_interval_samples} is more than budget.estimateSamples"
            f" ({budget.estimate_samples}): the estimate would evaluate only once and every"
            " batch size would look alike",
            hint="lower budget.evalIntervalSamples",
        )
    if standalone:
        _standalone_problems(spec, bad)
    return out


def _standalone_problems(spec: PowerAwareTrainingJobSpec, bad: _Bad) -> None:
    named = [("dataset.name", spec.dataset.name), ("proxyDataset.name", spec.proxy_dataset.name)]
    if spec.model.pretrain is not None:
        named.append(("model.pretrain.dataset", spec.model.pretrain.dataset))
    for field, name in named:
        info = DATASETS.get(name)
        if info is not None and not info.installed():
            bad(field, f"data set {name!r} is not installed: {data_dir() / info.data_path}"
                " is missing", hint="run `make data`; EDGETRAIN_DATA_DIR overrides the folder")
    weights = spec.model.weights
    if weights:
        path = Path(weights)
        if not path.exists():
            bad("model.weights", f"{weights} does not exist", hint="run edgetrain pretrain")
        elif not path.is_file():
            bad("model.weights", f"{weights} is not a file")
        elif not can_access(path, os.R_OK):
            bad("model.weights", f"{weights} is not readable (check its permissions)")
    device = spec.placement.device
    board_name = device_board(device)
    if board_name is not None and not device.startswith("sim:"):
        bad(
            "placement.device",
            f"must be 'sim:<board>' or 'local', got {device!r}",
            hint=f"boards: {_known(list(BOARDS))}",
        )
        return
    if board_name is None:
        _local_device_problems(bad)
        return
    board = BOARDS.get(board_name)
    if board is None:
        bad(
            "placement.device",
            f"unknown board {board_name!r}; simulated boards: {_known(list(BOARDS))}",
        )
        return
    idle_w = board.physics.idle_w
    if spec.power_limit_watts is not None and spec.power_limit_watts <= idle_w:
        bad(
            "powerLimitWatts",
            f"{spec.power_limit_watts:g} W is not above {board_name}'s idle power"
            f" ({idle_w:g} W, simulated); nothing could train under it",
            hint="raise the limit or pick a smaller board",
        )
    if spec.gpu_frequencies_hz is not None:
        unknown = sorted(set(spec.gpu_frequencies_hz) - set(board.gpu_freqs_hz))
        if unknown:
            bad(
                "gpuFrequenciesHz",
                f"{unknown} are not in {board_name}'s GPU table"
                f" ({', '.join(str(f) for f in board.gpu_freqs_hz)})",
            )


def _local_device_problems(bad: _Bad) -> None:
    # Both lookups only list sysfs folders: cheap, and a non-Jetson fails here, not after an
    # estimate of many minutes.
    from edgetrain.device import DeviceError, GpuDevfreq, select_power_sensor

    try:
        GpuDevfreq.discover(Path("/"))
        select_power_sensor(Path("/"))
    except DeviceError as exc:
        bad(
            "placement.device",
            f"'local' needs this machine to be a Jetson, but {exc}",
            hint="use 'sim:<board>' for a device twin",
        )


def validate_job(
    spec: PowerAwareTrainingJobSpec,
    source: str | Path = "job",
    *,
    prefix: str = "spec.",
    standalone: bool = True,
) -> None:
    """Raise the first problem of `job_problems` as one InputError (with a count of the rest)."""
    problems = job_problems(spec, source, prefix=prefix, standalone=standalone)
    if not problems:
        return
    first = problems[0]
    if len(problems) > 1:
        more = f"{len(problems) - 1} more problem{'s' if len(problems) > 2 else ''}"
        first.hint = f"{first.hint}; {more}" if first.hint else more
    raise first


def check_workload_options(model: str, dataset: str, batch_sizes: list[int] | None = None,
                           dataset_limit: int | None = None) -> None:
    """The cheap checks of a workload command's --model/--dataset/--batch-size(s), before torch."""
    kind = MODELS.get(model)
    if kind is None:
        raise InputError("--model", f"unknown model {model!r}; known: {_known(list(MODELS))}")
    info = DATASETS.get(dataset)
    if info is None:
        raise InputError(
            "--dataset", f"unknown data set {dataset!r}; known: {_known(list(DATASETS))}"
        )
    if info.kind != kind:
        raise InputError(
            "--dataset",
            f"{model} is {_a(kind)} model but {dataset!r} is {_a(info.kind)} data set",
            hint=f"pick {_a(kind)} set: {_sets_of_kind(kind)}",
        )
    train = info.train_size(dataset_limit)
    too_big = [b for b in batch_sizes or [] if b > train]
    if too_big:
        raise InputError(
            "--batch-size",
            f"{too_big} exceed the {train} training samples of {dataset!r}",
            hint="use smaller batch sizes or a larger --dataset-limit",
        )


def can_access(path: Path, mode: int) -> bool:
    """access(2) as the process will open the file: its effective UID and capabilities, not
    the real UID alone (a virtual node's non-root pod reads through CAP_DAC_READ_SEARCH)."""
    return os.access(path, mode, effective_ids=os.access in os.supports_effective_ids)


def check_output_path(path: Path, option: str, *, folder: bool = False) -> None:
    """Fail before any work when an output (a file, or a `folder`) could not be written."""
    if folder and path.exists() and not path.is_dir():
        raise InputError(option, f"{path} exists and is not a folder")
    if not folder and path.is_dir():
        raise InputError(option, f"{path} is a folder; give a file name")
    ancestor = path if folder else path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(option, f"{path} cannot be created: {ancestor} is not a folder")
    if not can_access(ancestor, os.W_OK | os.X_OK):
        raise InputError(option, f"{path} cannot be created: {ancestor} is not writable")
