"""Model registry and FLOP counting (real PyTorch, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from edgetrain.workloads import models
from edgetrain.workloads.models import (
    UnknownModelError,
    build_model,
    flops_per_sample,
    model_names,
    workload_cost,
)


@pytest.mark.parametrize("name", ["resnet18", "resnet8", "mobilenetv2"])
def test_models_train_one_step(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name, in_channels=1, num_classes=7)
    x = torch.randn(2, 1, 28, 28)
    logits = model(x)
    assert logits.shape == (2, 7)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 6]))
    loss.backward()  # type: ignore[no-untyped-call]
    assert all(p.grad is not None for p in model.parameters())


def test_registry_names_and_error() -> None:
    assert set(model_names()) >= {"resnet18", "resnet8", "mobilenetv2"}
    with pytest.raises(UnknownModelError, match="resnet18"):
        build_model("vgg")


def test_resnet18_cifar_flops() -> None:
    cost = workload_cost("resnet18", (3, 32, 32), 10)
    # CIFAR ResNet18: ~0.56 GMAC forward = ~1.11 GFLOP; backward ~2x forward
    assert cost.forward_flops_per_sample == pytest.approx(1.11e9, rel=0.02)
    assert cost.flops_per_sample == pytest.approx(3 * cost.forward_flops_per_sample, rel=0.02)
    assert cost.param_count == 11_173_962
    assert flops_per_sample("resnet8") < flops_per_sample("resnet18") / 20


def test_depthwise_backward_is_not_overcounted() -> None:
    cost = workload_cost("mobilenetv2", (3, 32, 32), 10)
    # torch's own grad_weight formula ignores groups (~20x too many FLOPs here)
    assert cost.flops_per_sample / cost.forward_flops_per_sample == pytest.approx(3.0, rel=0.05)


def test_flops_scale_with_input_size() -> None:
    small = flops_per_sample("resnet8", (3, 32, 32))
    large = flops_per_sample("resnet8", (3, 64, 64))
    assert large == pytest.approx(4 * small, rel=0.02)


def test_disk_cache_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path))
    workload_cost.cache_clear()
    first = workload_cost("resnet8", (3, 16, 16), 5)
    files = list((tmp_path / "flops").glob("resnet8-3x16x16-n5-v*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["flops_per_sample"] == first.flops_per_sample
    workload_cost.cache_clear()

    def boom(*_args: object) -> None:
        raise AssertionError("recounted despite the disk cache")

    monkeypatch.setattr(models, "_measure", boom)
    assert workload_cost("resnet8", (3, 16, 16), 5) == first
    workload_cost.cache_clear()


def test_cpu_training_steps_do_not_stall() -> None:
    """oneDNN's CPU conv backward stalled after a few Adam steps on AMD EPYC (PyTorch 2.15):
    ten steps must finish, in a child process so a stall fails instead of hanging the suite."""
    import subprocess
    import sys

    script = (
        "import torch, torch.nn.functional as F\n"
        "from edgetrain.workloads.models import build_model\n"
        "torch.manual_seed(0)\n"
        "m = build_model('resnet8-w025', 1, 10)\n"
        "opt = torch.optim.Adam(m.parameters(), lr=2e-3)\n"
        "x, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))\n"
        "for _ in range(10):\n"
        "    opt.zero_grad(); F.cross_entropy(m(x), y).backward(); opt.step()\n"
        "print(torch.backends.mkldnn.enabled)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
