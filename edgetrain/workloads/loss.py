"""The training loss, shared by the training loop and the gradient-noise probe."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy for classification and for every position of a text window."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
