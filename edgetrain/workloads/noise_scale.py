"""Measuring the gradient noise scale during training (torch side of `planner/noise.py`).

A probe splits one minibatch into k micro-batches and takes each one's gradient: the mean squared
norm of those (batch b/k) and the squared norm of their mean (batch b) give |G|² and tr(Σ). The
probe leaves the run as it was: no optimizer step, and the model's buffers (BatchNorm running
statistics) and the RNG state are restored, so the trained trajectory and its samples to target
are exactly what they would be without it.
"""

from __future__ import annotations

import torch
from torch import nn

from edgetrain.planner.noise import NoiseSample, gradient_estimates
from edgetrain.workloads.accel import CPU, Accelerator
from edgetrain.workloads.loss import loss_of

#: Micro-batches per probe (fewer when b is smaller or not divisible).
MICRO_BATCHES = 4
#: A probe costs about one step; probing at most every this many steps bounds its cost to
#: 1/16 of the training's compute (6 %), less at small b where evaluations are rarer.
MIN_STEPS_BETWEEN = 16


def micro_batches(batch_size: int) -> int:
    """How many micro-batches a probe at `batch_size` splits into (≥ 2; 0: cannot probe)."""
    for k in range(min(MICRO_BATCHES, batch_size), 1, -1):
        if batch_size % k == 0:
            return k
    return 0


def probe_interval_samples(batch_size: int, eval_interval_samples: int) -> int:
    """Samples between probes: every evaluation interval, and at most one step in 16."""
    return max(eval_interval_samples, MIN_STEPS_BETWEEN * batch_size)


def probe(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    samples: int,
    accel: Accelerator = CPU,
) -> NoiseSample | None:
    """|G|² and tr(Σ) from this minibatch's micro-batch gradients (None: b too small)."""
    batch = int(x.shape[0])
    k = micro_batches(batch)
    if k < 2:
        return None
    buffers = {name: buf.detach().clone() for name, buf in model.named_buffers()}
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if accel.is_cuda else None
    params = [p for p in model.parameters() if p.requires_grad]
    grads: list[torch.Tensor] = []
    try:
        for xc, yc in zip(x.chunk(k), y.chunk(k), strict=True):
            model.zero_grad(set_to_none=True)
            with accel.autocast():
                loss = loss_of(model, xc, yc)
            loss.backward()  # type: ignore[no-untyped-call]
            grads.append(
                torch.cat([
                    (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float()
                    for p in params
                ])
            )
    finally:
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name, buf in model.named_buffers():
                buf.copy_(buffers[name])
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
    stacked = torch.stack(grads)
    small_sq = float(stacked.pow(2).sum(dim=1).mean())
    big_sq = float(stacked.mean(dim=0).pow(2).sum())
    grad_sq, trace = gradient_estimates(small_sq, big_sq, batch // k, batch)
    return NoiseSample(samples=samples, grad_sq=grad_sq, trace=trace)
