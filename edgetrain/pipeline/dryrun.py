"""`edgetrain run --dry-run`: the phases a job would run, their cache keys, and the work.

Also the one place that names cache paths, so the dry run and the real run agree. Torch-free.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from edgetrain.api.io import file_sha256
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key, profile_cache_key
from edgetrain.api.profile import metadata_path
from edgetrain.device.board import parse_l4t_release
from edgetrain.device.sim.boards import BOARDS
from edgetrain.pipeline.validate import device_board
from edgetrain.workloads.catalog import DATASETS


def cache_root() -> Path:
    """$EDGETRAIN_CACHE_DIR or ~/.cache/edgetrain."""
    env = os.environ.get("EDGETRAIN_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "edgetrain"


def efficiency_cache_path(spec: PowerAwareTrainingJobSpec, key: str) -> Path:
    """Where `edgetrain run` caches the efficiency vector of `key`."""
    return cache_root() / "efficiency" / f"{spec.model.architecture}-{key}.json"


def profile_cache_path(spec: PowerAwareTrainingJobSpec, board: str, key: str) -> Path:
    """Where `edgetrain run` caches the profile CSV of `key` (its sidecar is written last)."""
    return cache_root() / "profiles" / f"{board}-{spec.model.architecture}-{key}.csv"


def pretrain_weights_path(model: str, dataset: str, samples: int) -> Path:
    """The cached weights of the job's pretrain recipe (imports torch: dry runs only)."""
    from edgetrain.workloads.weights import PretrainSpec, weights_path

    return weights_path(PretrainSpec(model=model, dataset=dataset, samples=samples))


class DryRunPhase(BaseModel):
    """One phase: cached or to run, its cache key and path, and the samples it would train."""

    phase: str
    cached: bool
    key: str | None
    path: str | None
    samples_to_train: int  # an upper bound: budgets, not the samples a run will stop at


def dry_run(spec: PowerAwareTrainingJobSpec) -> list[DryRunPhase]:
    """What `edgetrain run` would do for a job that passed validation, without doing it."""
    phases: list[DryRunPhase] = []
    weights_sha: str | None = None
    if spec.model.weights:
        weights_sha = file_sha256(spec.model.weights)
    elif spec.model.pretrain is not None:
        pre = pretrain_weights_path(
            spec.model.architecture, spec.model.pretrain.dataset, spec.model.pretrain.samples
        )
        cached = pre.is_file()
        phases.append(
            DryRunPhase(
                phase="pretrain",
                cached=cached,
                key=pre.stem.rsplit("-", 1)[-1],
                path=str(pre),
                samples_to_train=0 if cached else spec.model.pretrain.samples,
            )
        )
        # Without the weights their hash is unknown, so the efficiency key is too.
        weights_sha = file_sha256(pre) if cached else None
    pretrain_pending = bool(phases) and not phases[0].cached
    budget = spec.budget
    estimate_work = len(spec.batch_sizes) * len(budget.seeds) * budget.estimate_samples
    if pretrain_pending:
        phases.append(
            DryRunPhase(
                phase="estimate",
                cached=False,
                key=None,
                path=None,
                samples_to_train=estimate_work,
            )
        )
    else:
        key = efficiency_cache_key(spec, weights_sha)
        path = efficiency_cache_path(spec, key)
        cached = path.is_file()
        phases.append(
            DryRunPhase(
                phase="estimate",
                cached=cached,
                key=key,
                path=str(path),
                samples_to_train=0 if cached else estimate_work,
            )
        )
    phases.append(_profile_phase(spec))
    phases.append(
        DryRunPhase(
            phase="train", cached=False, key=None, path=None, samples_to_train=budget.train_samples
        )
    )
    return phases


def _profile_phase(spec: PowerAwareTrainingJobSpec) -> DryRunPhase:
    board_name = device_board(spec.placement.device)
    board = BOARDS.get(board_name or "")
    info = DATASETS[spec.dataset.name]
    freqs = spec.gpu_frequencies_hz or (list(board.gpu_freqs_hz) if board else [])
    # Every point trains `profile_minibatches` minibatches at least (more while power settles).
    per_column = sum(spec.batch_sizes) * spec.budget.profile_minibatches
    work = per_column * max(1, len(freqs))
    if board is None:  # 'local': the board is known only when this machine's /sys is read
        return DryRunPhase(phase="profile", cached=False, key=None, path=None,
                           samples_to_train=work)
    l4t = parse_l4t_release(board.l4t_release)
    key = profile_cache_key(spec, board.name, l4t, info.input_shape)
    path = profile_cache_path(spec, board.name, key)
    cached = path.is_file() and metadata_path(path).is_file()
    return DryRunPhase(
        phase="profile",
        cached=cached,
        key=key,
        path=str(path),
        samples_to_train=0 if cached else work,
    )
