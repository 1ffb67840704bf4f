"""The one resolver of `--device` and `--precision` used by every command that trains."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from edgetrain.api.errors import BadInputError
from edgetrain.api.training import Precision

# A CUDA context costs this much device memory per process before any tensor exists.
CUDA_CONTEXT_BYTES = 512 * 2**20


class DeviceChoiceError(BadInputError):
    """A device or precision this machine cannot provide; the CLI exits 2 with the message."""


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(text: str = "auto") -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' → a device that exists here, else DeviceChoiceError."""
    choice = text.strip().lower()
    if choice == "auto":
        return resolve_device("cuda") if _cuda_count() else torch.device("cpu")
    if choice == "cpu":
        return torch.device("cpu")
    if choice == "cuda" or choice.startswith("cuda:"):
        index_text = choice.removeprefix("cuda").removeprefix(":")
        if choice != "cuda" and not index_text.isdigit():
            raise DeviceChoiceError(f"--device {text!r}: expected cuda:N with N a number")
        count = _cuda_count()
        if count == 0:
            raise DeviceChoiceError(
                f"--device {text}: no CUDA device on this machine (torch {torch.__version__});"
                " use --device cpu or --device auto"
            )
        index = int(index_text) if index_text else torch.cuda.current_device()
        if index >= count:
            raise DeviceChoiceError(
                f"--device {text}: this machine has {count} CUDA device(s), cuda:0 to"
                f" cuda:{count - 1}; pick one of those or --device auto"
            )
        return torch.device("cuda", index)
    raise DeviceChoiceError(f"--device must be auto, cpu, cuda or cuda:N, got {text!r}")


def parse_precision(text: str | Precision) -> Precision:
    """'fp32' | 'fp16' | 'bf16' → Precision, else DeviceChoiceError naming the choices."""
    try:
        return Precision(str(text).strip().lower())
    except ValueError:
        raise DeviceChoiceError(f"--precision must be fp32, fp16 or bf16, got {text!r}") from None


_DTYPES = {Precision.fp16: torch.float16, Precision.bf16: torch.bfloat16}


@dataclass(frozen=True)
class Accelerator:
    """A resolved device and precision: autocast, gradient scaling, synchronised clocks."""

    device: torch.device
    precision: Precision = Precision.fp32

    @property
    def is_cuda(self) -> bool:
        """True when kernels run asynchronously on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def label(self) -> str:
        """The device as recorded in results: 'cpu' or 'cuda:N'."""
        return str(self.device)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Mixed-precision region for forward passes (nothing at fp32)."""
        if self.precision is Precision.fp32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=_DTYPES[self.precision])

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """fp16 gradients underflow without loss scaling; bf16 and fp32 need none."""
        if self.precision is not Precision.fp16:
            return None
        return torch.amp.GradScaler(self.device.type)

    def synchronize(self) -> None:
        """Wait for queued kernels so a clock read after it covers the work (CUDA only)."""
        if self.is_cuda:
            torch.cuda.synchronize(self.device)


CPU = Accelerator(torch.device("cpu"))


def resolve(device: str = "auto", precision: str | Precision = Precision.fp32) -> Accelerator:
    """The device and precision to train with; a combination the hardware lacks is an error."""
    chosen = resolve_device(device)
    prec = parse_precision(precision)
    if prec is Precision.fp16 and chosen.type == "cpu":
        # CPU autocast to fp16 runs, but slower than fp32 with no memory win worth having.
        raise DeviceChoiceError("--precision fp16 needs a CUDA device (on CPU use bf16 or fp32)")
    if prec is Precision.bf16 and chosen.type == "cuda":
        with torch.cuda.device(chosen):
            supported = torch.cuda.is_bf16_supported(including_emulation=False)
        if not supported:
            name = torch.cuda.get_device_name(chosen)
            raise DeviceChoiceError(
                f"--precision bf16: {name} ({chosen}) has no bfloat16 support;"
                " use --precision fp16 or fp32"
            )
    return Accelerator(chosen, prec)


def rng_state(accel: Accelerator) -> dict[str, torch.Tensor]:
    """RNG state to checkpoint: the CPU generator always, the CUDA one when it was used."""
    state = {"cpu": torch.get_rng_state()}
    if accel.is_cuda:
        state["cuda"] = torch.cuda.get_rng_state(accel.device)
    return state


def restore_rng_state(saved: object, accel: Accelerator) -> None:
    """Restore what `rng_state` saved (or an older CPU-only tensor); CUDA's only on CUDA."""
    if isinstance(saved, torch.Tensor):
        torch.set_rng_state(saved.cpu())
        return
    if not isinstance(saved, dict) or "cpu" not in saved:
        raise ValueError("checkpoint has no RNG state")
    torch.set_rng_state(saved["cpu"].cpu())
    if accel.is_cuda and "cuda" in saved:
        torch.cuda.set_rng_state(saved["cuda"].cpu(), accel.device)


@contextlib.contextmanager
def peak_memory(accel: Accelerator) -> Iterator[list[int]]:
    """Measures peak allocated device bytes of the block into the yielded one-item list."""
    out = [0]
    if accel.is_cuda:
        torch.cuda.reset_peak_memory_stats(accel.device)
    yield out
    if accel.is_cuda:
        out[0] = int(torch.cuda.max_memory_allocated(accel.device))
