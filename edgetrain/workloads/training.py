"""The training loop shared by estimate, pretrain and train: deterministic, resumable by samples."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from edgetrain.api.training import OptimizerName, OptimizerSpec, crossing_samples
from edgetrain.planner.noise import NoiseSample, noise_scale
from edgetrain.workloads import datasets
from edgetrain.workloads.accel import CPU, Accelerator
from edgetrain.workloads.loss import loss_of
from edgetrain.workloads.models import build_model

TEXT_SEQ_LEN = 64
# Data sets up to this size live on the accelerator for the whole run (ours are all smaller);
# larger ones stay in pinned host memory and each minibatch is copied over.
DEVICE_RESIDENT_MAX_BYTES = 1 << 30


def torch_threads(environ: Mapping[str, str] | None = None, cores: int | None = None) -> int:
    """Intra-op threads: OMP_NUM_THREADS where set (the usual knob, which torch itself reads
    and a plain set_num_threads would override), else the cores we may use, at most 4."""
    env = os.environ if environ is None else environ
    raw = env.get("OMP_NUM_THREADS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    return max(1, min(4, cores))


def configure_threads() -> None:
    """Use the cores we have, and no more (2 here; a Jetson has 4 to 12)."""
    torch.set_num_threads(torch_threads())


@dataclass(frozen=True)
class Task:
    """A data set as training samples: images with labels, or text windows with next chars."""

    name: str
    kind: str  # "image" | "text"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    in_channels: int

    @property
    def train_size(self) -> int:
        """Number of training samples (images or text windows)."""
        return int(self.x_train.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of all four tensors."""
        return sum(
            t.element_size() * t.nelement()
            for t in (self.x_train, self.y_train, self.x_test, self.y_test)
        )

    @property
    def device(self) -> torch.device:
        """Where the training tensors live."""
        return self.x_train.device

    def to(self, device: torch.device, max_resident_bytes: int = DEVICE_RESIDENT_MAX_BYTES) -> Task:
        """The task held on `device` once (small sets), or pinned on the host for copying."""
        if self.device == device:
            return self
        resident = device.type == "cpu" or self.nbytes <= max_resident_bytes

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device) if resident else t.pin_memory()

        return dataclasses.replace(
            self,
            x_train=move(self.x_train),
            y_train=move(self.y_train),
            x_test=move(self.x_test),
            y_test=move(self.y_test),
        )

    def batch(
        self, start_sample: int, batch_size: int, seed: int, device: torch.device | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples [start, start + b) of the seeded, epoch-wise shuffled training stream."""
        index = sample_indices(start_sample, batch_size, self.train_size, seed)
        if self.device.type != "cpu":
            index = index.to(self.device, non_blocking=True)
        x, y = self.x_train[index], self.y_train[index]
        if device is not None and x.device != device:
            # Host-resident set (too large for the device): gathered rows are copied per batch.
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return x, y


@functools.lru_cache(maxsize=4)
def _epoch_permutation(seed: int, epoch: int, train_size: int) -> NDArray[np.int64]:
    # Drawing a permutation of 60,000 per minibatch cost more than a small model's step.
    perm = np.random.default_rng([seed, epoch]).permutation(train_size)
    perm.setflags(write=False)
    return perm


def sample_indices(start_sample: int, batch_size: int, train_size: int, seed: int) -> torch.Tensor:
    """Indices of stream positions [start, start + b): epoch e is permutation(seed, e)."""
    first_epoch, first_offset = divmod(start_sample, train_size)
    if first_offset + batch_size <= train_size:  # the common case: within one epoch
        perm = _epoch_permutation(seed, first_epoch, train_size)
        return torch.from_numpy(perm[first_offset : first_offset + batch_size].copy())
    positions = np.arange(start_sample, start_sample + batch_size)
    epochs, offsets = np.divmod(positions, train_size)
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        mask = epochs == epoch
        out[mask] = _epoch_permutation(seed, int(epoch), train_size)[offsets[mask]]
    return torch.from_numpy(out)


def _windows(codes: NDArray[np.int64], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = (len(codes) - 1) // seq_len
    tokens = torch.from_numpy(codes[: n * seq_len + 1].copy())
    x = tokens[:-1].reshape(n, seq_len)
    y = tokens[1:].reshape(n, seq_len)
    return x, y


def load_task(name: str, limit: int | None = None) -> Task:
    """A data set by name: image sets as classification, text sets as next-character windows."""
    if name in datasets.IMAGE_SETS:
        data = datasets.load_images(name, limit)
        return Task(
            name,
            "image",
            torch.from_numpy(data.x_train),
            torch.from_numpy(data.y_train),
            torch.from_numpy(data.x_test),
            torch.from_numpy(data.y_test),
            data.num_classes,
            data.input_shape[0],
        )
    text = datasets.load_text(name, None if limit is None else limit * (TEXT_SEQ_LEN + 1))
    x_train, y_train = _windows(text.train, TEXT_SEQ_LEN)
    x_test, y_test = _windows(text.test, TEXT_SEQ_LEN)
    return Task(name, "text", x_train, y_train, x_test, y_test, len(text.vocabulary), 0)


def make_model(architecture: str, task: Task) -> nn.Module:
    """The architecture sized for the task (input channels, classes or vocabulary)."""
    return build_model(architecture, task.in_channels, task.num_classes)


def make_optimizer(spec: OptimizerSpec, model: nn.Module, batch_size: int) -> torch.optim.Optimizer:
    """The optimizer with the learning rate scaled for `batch_size`."""
    lr = spec.learning_rate_for(batch_size)
    params = model.parameters()
    if spec.name is OptimizerName.adam:
        return torch.optim.Adam(params, lr=lr)
    if spec.name is OptimizerName.adamw:
        return torch.optim.AdamW(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    accel: Accelerator = CPU,
    scaler: torch.amp.GradScaler | None = None,
) -> torch.Tensor:
    """One minibatch: forward (autocast), backward, update; the loss, left on the device.

    The model must be in training mode. The loss is not read back (`.item()` would wait for
    the device every step); callers that want the number pay that sync themselves.
    """
    optimizer.zero_grad(set_to_none=True)
    with accel.autocast():
        loss = loss_of(model, x, y)
    if scaler is not None:
        scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return loss.detach()


@torch.no_grad()
def evaluate(
    model: nn.Module, task: Task, max_samples: int | None = None, accel: Accelerator = CPU
) -> float:
    """Accuracy on (the first `max_samples` of) the fixed test split; per character for text."""
    model.eval()
    n = task.x_test.shape[0] if max_samples is None else min(max_samples, task.x_test.shape[0])
    correct = torch.zeros((), dtype=torch.int64, device=accel.device)
    total = 0
    for start in range(0, n, 512):
        x, y = task.x_test[start : min(n, start + 512)], task.y_test[start : min(n, start + 512)]
        x, y = x.to(accel.device, non_blocking=True), y.to(accel.device, non_blocking=True)
        with accel.autocast():
            pred = model(x).argmax(dim=-1)
        correct += (pred == y).sum()
        total += y.numel()
    return int(correct) / max(total, 1)


@dataclass
class TrainState:
    """Where a run stands: samples seen, the evaluation curve and the noise probes so far."""

    samples: int = 0
    accuracy: float = 0.0
    reached_target: bool = False
    curve: list[tuple[int, float]] = field(default_factory=list)
    # (samples, |G|², tr Σ) of each gradient-noise probe (workloads/noise_scale.py)
    noise: list[tuple[int, float, float]] = field(default_factory=list)

    def noise_samples(self) -> list[NoiseSample]:
        """The probes as planner values."""
        return [NoiseSample(s, g, t) for s, g, t in self.noise]

    def gradient_noise_scale(self) -> float | None:
        """B_simple over the run so far (None: no probe)."""
        return noise_scale(self.noise_samples())

    def samples_to_target(self, target_accuracy: float) -> float | None:
        """Where the curve crossed the target, interpolated (None: not reached)."""
        return crossing_samples(self.curve, target_accuracy) if self.reached_target else None


StepHook = Callable[[TrainState, int], None]
"""Called after every minibatch with the state and the batch size (device-time accounting)."""
EvalHook = Callable[[TrainState], None]
"""Called after every evaluation (progress, checkpoints)."""


def train_to_target(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    task: Task,
    *,
    batch_size: int,
    target_accuracy: float,
    sample_budget: int,
    eval_interval_samples: int,
    seed: int,
    eval_samples: int | None = None,
    state: TrainState | None = None,
    on_step: StepHook | None = None,
    on_eval: EvalHook | None = None,
    accel: Accelerator = CPU,
    scaler: torch.amp.GradScaler | None = None,
    measure_noise: bool = False,
) -> TrainState:
    """Train until the test accuracy reaches the target or the sample budget is spent.

    Evaluates whenever the sample count crosses a multiple of `eval_interval_samples`, so the
    samples-to-accuracy of different batch sizes are measured on the same grid. Callers seed
    torch (or restore its RNG state when resuming) and put the model, optimizer state and
    (ideally) the task on `accel.device`; the data order depends only on `seed`. With
    `measure_noise`, the gradient noise scale is probed now and then (`noise_scale.probe`: the
    trajectory is unchanged).
    """
    from edgetrain.workloads import noise_scale as ns

    state = state or TrainState()
    next_eval = (state.samples // eval_interval_samples + 1) * eval_interval_samples
    interval = ns.probe_interval_samples(batch_size, eval_interval_samples)
    # Probes fall at the first step past the middle of each interval: where the last one fell
    # says where the next falls, so a resumed run probes exactly where an unbroken one would.
    last = state.noise[-1][0] if state.noise else -interval
    next_probe = (last // interval + 1) * interval + interval // 2
    model.train()
    while not state.reached_target and state.samples < sample_budget:
        x, y = task.batch(state.samples, batch_size, seed, accel.device)
        if measure_noise and state.samples >= next_probe:
            got = ns.probe(model, x, y, state.samples, accel)
            if got is not None:
                state.noise.append((got.samples, got.grad_sq, got.trace))
            next_probe = (state.samples // interval + 1) * interval + interval // 2
        train_step(model, optimizer, x, y, accel, scaler)
        state.samples += batch_size
        if on_step:
            on_step(state, batch_size)
        if state.samples >= next_eval or state.samples >= sample_budget:
            state.accuracy = evaluate(model, task, eval_samples, accel)
            model.train()
            state.curve.append((state.samples, state.accuracy))
            state.reached_target = state.accuracy >= target_accuracy
            next_eval = (state.samples // eval_interval_samples + 1) * eval_interval_samples
            if on_eval:
                on_eval(state)
    return state
