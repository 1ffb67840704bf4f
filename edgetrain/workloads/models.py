"""Registry of real PyTorch models by name, and their training cost (FLOPs, bytes) per sample.

Models are hand-written (no torchvision) so the package has no extra downloads. FLOPs come from
`torch.utils.flop_counter.FlopCounterMode` over one forward + backward pass, cached in-process and
on disk (`~/.cache/edgetrain/flops/`, or `$EDGETRAIN_CACHE_DIR/flops/`).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from edgetrain.api.errors import BadInputError
from edgetrain.api.workload import COST_MODEL_VERSION, WorkloadCost
from edgetrain.workloads.catalog import MODELS
from edgetrain.workloads.charformer import CharTransformer

#: Set to 1 to let PyTorch use oneDNN (mkldnn) for CPU kernels again.
ENV_CPU_ONEDNN = "EDGETRAIN_CPU_ONEDNN"
# oneDNN's CPU convolution backward stalls for minutes after a few Adam steps on AMD EPYC hosts
# (PyTorch 2.15; resnet8-w025, b=8: step 4 never returned), while PyTorch's native kernels train
# these small models as fast. Set on import, so every path that builds a model (spawned
# estimation workers, benches, tests) gets it; CUDA is unaffected.
torch.backends.mkldnn.enabled = os.environ.get(ENV_CPU_ONEDNN) == "1"  # type: ignore[assignment]


class BasicBlock(nn.Module):
    """ResNet basic block (two 3x3 convolutions with an identity or 1x1 projection shortcut)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = F.relu(out + self.shortcut(x))
        return out


class CifarResNet(nn.Module):
    """CIFAR-style ResNet: 3x3 stem without max-pool, BasicBlock stages, global average pool."""

    def __init__(
        self,
        widths: tuple[int, ...],
        blocks: tuple[int, ...],
        in_channels: int = 3,
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        layers: list[nn.Module] = []
        in_planes = widths[0]
        for stage, (width, count) in enumerate(zip(widths, blocks, strict=True)):
            for i in range(count):
                stride = 2 if (stage > 0 and i == 0) else 1
                layers.append(BasicBlock(in_planes, width, stride))
                in_planes = width
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(self.stem(x))
        logits: torch.Tensor = self.fc(torch.flatten(self.pool(out), 1))
        return logits


class InvertedResidual(nn.Module):
    """MobileNetV2 inverted residual: 1x1 expand, 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, in_planes: int, planes: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = in_planes * expand
        self.use_residual = stride == 1 and in_planes == planes
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [
                nn.Conv2d(in_planes, hidden, 1, bias=False),
                nn.BatchNorm2d(hidden),
                nn.ReLU6(inplace=True),
            ]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.block(x)
        return x + out if self.use_residual else out


def _divisible(channels: float, divisor: int = 8) -> int:
    """Round a scaled channel count as torchvision does: to a multiple of 8, never 10% below."""
    out = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * channels else out


class CifarMobileNetV2(nn.Module):
    """MobileNetV2 with CIFAR strides (stem stride 1, second stage stride 1) and a width multiplier.

    Width 1.0 is the paper's network; a smaller width scales every layer including the last 1×1
    (torchvision keeps 1280 there) so that CPU benchmarks stay fast.
    """

    # (expansion, output channels, repeats, first stride) per stage, as in Sandler et al. Table 2,
    # with the first two downsamplings removed so 32x32 inputs keep a 4x4 final feature map.
    CONFIG: tuple[tuple[int, int, int, int], ...] = (
        (1, 16, 1, 1),
        (6, 24, 2, 1),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    # A MobileNetV2-class network small enough for 10⁴-sample trainings on one CPU core: the
    # stem downsamples, and four short stages (two with residual repeats) end at 2×2 on 28×28.
    TINY_CONFIG: tuple[tuple[int, int, int, int], ...] = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 2, 2),
        (6, 64, 1, 2),
    )

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        width: float = 1.0,
        config: tuple[tuple[int, int, int, int], ...] | None = None,
        stem_stride: int = 1,
    ) -> None:
        super().__init__()
        stem, last = _divisible(32 * width), _divisible(1280 * width)
        layers: list[nn.Module] = [
            nn.Conv2d(in_channels, stem, 3, stride=stem_stride, padding=1, bias=False),
            nn.BatchNorm2d(stem),
            nn.ReLU6(inplace=True),
        ]
        in_planes = stem
        for expand, channels, repeats, stride in config or self.CONFIG:
            planes = _divisible(channels * width)
            for i in range(repeats):
                layers.append(InvertedResidual(in_planes, planes, stride if i == 0 else 1, expand))
                in_planes = planes
        layers += [nn.Conv2d(in_planes, last, 1, bias=False), nn.BatchNorm2d(last)]
        layers.append(nn.ReLU6(inplace=True))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(last, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.fc(torch.flatten(self.pool(self.features(x)), 1))
        return logits


ModelBuilder = Callable[[int, int], nn.Module]

#: name -> builder(in_channels, num_classes)
MODEL_REGISTRY: dict[str, ModelBuilder] = {
    "resnet18": lambda c, n: CifarResNet((64, 128, 256, 512), (2, 2, 2, 2), c, n),
    "resnet8": lambda c, n: CifarResNet((16, 32, 64), (1, 1, 1), c, n),
    "mobilenetv2": lambda c, n: CifarMobileNetV2(c, n),
    # MobileNetV2 at width 0.25: the MobileNetV2-class model of the CPU-sized paper benchmark.
    "mobilenetv2-w025": lambda c, n: CifarMobileNetV2(c, n, width=0.25),
    # Inverted residuals at width 0.25, strided stem, 7 blocks: the CPU-scale paper benchmark's
    # MobileNetV2-class model (mobilenetv2-w025 costs ~13 ms per 28×28 sample on one core).
    "mobilenetv2-tiny": lambda c, n: CifarMobileNetV2(
        c, n, width=0.25, config=CifarMobileNetV2.TINY_CONFIG, stem_stride=2
    ),
    # ResNet-8 at width 0.25: small enough for real time-to-accuracy runs on 2 CPU cores.
    "resnet8-w025": lambda c, n: CifarResNet((4, 8, 16), (1, 1, 1), c, n),
    # Text models: n is the vocabulary size; the input is a window of token indices.
    "charformer": lambda _c, n: CharTransformer(n),
    "charformer-small": lambda _c, n: CharTransformer(
        n, embed_dim=64, num_layers=2, num_heads=4, dropout=0.0
    ),
}
TEXT_MODELS = frozenset(name for name, kind in MODELS.items() if kind == "text")


def is_text_model(name: str) -> bool:
    """True for models that read token windows rather than images."""
    return name in TEXT_MODELS


class UnknownModelError(BadInputError, KeyError):
    """Raised for a model name that is not in the registry."""


def model_names() -> list[str]:
    """Names accepted by `build_model`."""
    return sorted(MODEL_REGISTRY)


def build_model(name: str, in_channels: int = 3, num_classes: int = 10) -> nn.Module:
    """Instantiate a registered model (randomly initialised)."""
    try:
        builder = MODEL_REGISTRY[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; registered models: {', '.join(model_names())}"
        ) from None
    return builder(in_channels, num_classes)


def cache_dir() -> Path:
    """Where FLOP counts are cached: `$EDGETRAIN_CACHE_DIR/flops` or `~/.cache/edgetrain/flops`."""
    base = os.environ.get("EDGETRAIN_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "edgetrain"
    return root / "flops"


def _cache_key(name: str, input_shape: tuple[int, ...], num_classes: int) -> str:
    shape = "x".join(str(d) for d in input_shape)
    return f"{name}-{shape}-n{num_classes}-v{COST_MODEL_VERSION}"


def _conv_backward_flops(
    grad_out_shape: list[int],
    x_shape: list[int],
    w_shape: list[int],
    _bias: object,
    _stride: object,
    _padding: object,
    _dilation: object,
    transposed: bool,
    _output_padding: object,
    _groups: int,
    output_mask: list[bool],
    out_shape: object = None,
    **_kwargs: object,
) -> int:
    """Groups-aware convolution backward: grad_input and grad_weight each cost one forward.

    torch's built-in formula ignores `groups` for grad_weight, overcounting depthwise convolutions
    (MobileNetV2) by up to the channel count; the weight shape already carries in/groups here.
    """
    from torch.utils.flop_counter import conv_flop_count

    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def _measure(name: str, input_shape: tuple[int, ...], num_classes: int) -> WorkloadCost:
    from torch.utils.flop_counter import FlopCounterMode

    batch = 2  # >1 so BatchNorm in training mode behaves as in real training
    # Meta tensors carry shapes only: FLOPs are counted without computing anything.
    text = is_text_model(name)
    with torch.device("meta"):
        model = build_model(name, 0 if text else input_shape[0], num_classes)
    model.train()
    activation_elems = 0

    def count_output(_m: nn.Module, _i: object, out: object) -> None:
        nonlocal activation_elems
        if isinstance(out, torch.Tensor):
            activation_elems += out.numel()

    # Leaf-module outputs are what autograd keeps for backward: a proxy for activation traffic.
    hooks = [
        m.register_forward_hook(count_output) for m in model.modules() if not list(m.children())
    ]
    if text:  # token indices in, a next-token target for every position
        x = torch.zeros(batch, *input_shape, dtype=torch.long, device="meta")
        y = torch.zeros(batch, *input_shape, dtype=torch.long, device="meta")
    else:
        x = torch.empty(batch, *input_shape, device="meta")
        y = torch.zeros(batch, dtype=torch.long, device="meta")
    counter = FlopCounterMode(
        display=False,
        custom_mapping={torch.ops.aten.convolution_backward: _conv_backward_flops},
    )
    with counter:
        logits = model(x)
        forward_flops = counter.get_total_flops()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()  # type: ignore[no-untyped-call]
    total_flops = counter.get_total_flops()
    for h in hooks:
        h.remove()
    params = sum(p.numel() for p in model.parameters())
    return WorkloadCost(
        model=name,
        input_shape=input_shape,
        num_classes=num_classes,
        flops_per_sample=total_flops / batch,
        forward_flops_per_sample=forward_flops / batch,
        activation_bytes_per_sample=activation_elems * 4 / batch,
        param_count=params,
        param_bytes=params * 4,
    )


@functools.lru_cache(maxsize=256)
def workload_cost(
    name: str, input_shape: tuple[int, ...] = (3, 32, 32), num_classes: int = 10
) -> WorkloadCost:
    """Cost per sample of training `name`; counted once with FlopCounterMode, then cached."""
    if name not in MODEL_REGISTRY:
        build_model(name)  # raises UnknownModelError with the list of valid names
    input_shape = tuple(int(d) for d in input_shape)
    if is_text_model(name) != (len(input_shape) == 1):
        raise ValueError(
            f"{name} takes {'(sequence length,)' if is_text_model(name) else '(C, H, W)'}"
            f" inputs, got shape {input_shape}"
        )
    path = cache_dir() / f"{_cache_key(name, input_shape, num_classes)}.json"
    if path.is_file():
        try:
            return WorkloadCost.model_validate_json(path.read_text())
        except ValueError:
            pass  # a corrupt or outdated cache entry: recount below and overwrite it
    cost = _measure(name, input_shape, num_classes)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(cost.model_dump(mode="json"), fh)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home must not break simulation; the in-process cache still holds it
    return cost


def flops_per_sample(
    name: str, input_shape: tuple[int, ...] = (3, 32, 32), num_classes: int = 10
) -> float:
    """Forward + backward FLOPs per training sample (FlopCounterMode convention: 2 per MAC)."""
    return workload_cost(name, input_shape, num_classes).flops_per_sample
