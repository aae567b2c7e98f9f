"""CNNs written as small torch modules (torchvision is not installable beside torch 2.13 here).

Faithful architectures — ResNet-50 v1.5 and MobileNetV2 as in torchvision, a classic U-Net
(Ronneberger et al., padded convs + BatchNorm) at 512x512 — plus an irregular multi-branch
net of NASNet/Inception-like cells. All are exported with static shapes, as CNNs usually
are, by the same default ``torch.onnx.export``. BatchNorm statistics are randomised (seeded)
so Conv+BN folding has real work to do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from models.export import seeded, torch_export
from models.suite import Feed, ModelSpec, register

# Bump when a change here alters any built file's bytes: cached builds of older versions
# are then rebuilt (the version is part of the sidecar's fingerprint).
BUILD_VERSION = 1


def _nn() -> Any:
    import torch.nn as nn

    return nn


# --------------------------------------------------------------------------- ResNet-50
def _bottleneck() -> Any:
    """torchvision's Bottleneck (v1.5: stride on the 3x3 conv), with its ``dilation`` option
    (DeepLab's output stride 16 replaces stage 4's stride by dilation 2)."""
    nn = _nn()

    class Bottleneck(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, cin: int, planes: int, stride: int, dilation: int = 1) -> None:
            super().__init__()
            cout = planes * 4
            self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, dilation, dilation, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + identity)

    return Bottleneck


def _backbone(width: int, blocks: tuple[int, ...], dilate_last: bool) -> tuple[Any, list[Any]]:
    """ResNet stem and stages (``nn.Sequential`` each); ``dilate_last``: stage 4 keeps stage
    3's stride and dilates its 3x3 convs by 2 (output stride 16)."""
    nn = _nn()
    block = _bottleneck()
    stem = nn.Sequential(
        nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    )  # fmt: skip
    stages: list[Any] = []
    cin = width
    for i, n_blocks in enumerate(blocks):
        planes = width * 2**i
        dilated = dilate_last and i == len(blocks) - 1
        layer = []
        for b in range(n_blocks):
            stride = 2 if (b == 0 and i > 0 and not dilated) else 1
            layer.append(block(cin, planes, stride, 2 if dilated and b > 0 else 1))
            cin = planes * 4
        stages.append(nn.Sequential(*layer))
    return stem, stages


def deeplab(width: int = 64, num_classes: int = 21, blocks: tuple[int, ...] = (3, 4, 6, 3)) -> Any:
    """DeepLabv3-like segmenter: ResNet-50 at output stride 16 (stage 4 dilated by 2), an
    ASPP head (1x1, 3x3 at dilations 6/12/18, image pooling), a classifier and a bilinear
    upsample back to the input size. Dilated convs widen a chunk's halo by their dilation."""
    nn = _nn()
    import torch.nn.functional as F

    stem, stages = _backbone(width, blocks, dilate_last=True)
    c = width * 2 ** (len(blocks) - 1) * 4
    a = width * 4  # 256 for ResNet-50

    def cbr(cin: int, cout: int, k: int = 1, d: int = 1) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, padding=d * (k // 2), dilation=d, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        )  # fmt: skip

    class DeepLab(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.stem = stem
            self.stages = nn.Sequential(*stages)
            self.aspp = nn.ModuleList([cbr(c, a)] + [cbr(c, a, 3, d) for d in (6, 12, 18)])
            self.pool = cbr(c, a)
            self.project = cbr(5 * a, a)
            self.head = nn.Sequential(cbr(a, a, 3), nn.Conv2d(a, num_classes, 1))

        def forward(self, x: Any) -> Any:
            size = x.shape[-2:]
            f = self.stages(self.stem(x))
            p = self.pool(F.adaptive_avg_pool2d(f, 1)).expand(-1, -1, f.shape[2], f.shape[3])
            y = self.project(torch_cat([m(f) for m in self.aspp] + [p]))
            y = self.head(y)
            return F.interpolate(y, size=size, mode="bilinear", align_corners=False)

    return DeepLab()


def fpn(width: int = 64, channels: int = 256, blocks: tuple[int, ...] = (3, 4, 6, 3)) -> Any:
    """A detector's ResNet-50 + FPN: laterals (1x1) on stages 1-4, a top-down path (nearest
    2x upsample + lateral add), a 3x3 output conv per level; outputs P2..P5 (strides 4..32)."""
    nn = _nn()
    import torch.nn.functional as F

    stem, stages = _backbone(width, blocks, dilate_last=False)
    cins = [width * 2**i * 4 for i in range(len(blocks))]

    class FPN(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.stem = stem
            self.stages = nn.ModuleList(stages)
            self.lateral = nn.ModuleList([nn.Conv2d(ci, channels, 1) for ci in cins])
            self.smooth = nn.ModuleList([nn.Conv2d(channels, channels, 3, padding=1)
                                         for _ in cins])  # fmt: skip

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            feats = []
            for stage in self.stages:
                x = stage(x)
                feats.append(x)
            p = self.lateral[-1](feats[-1])
            outs = [self.smooth[-1](p)]
            for i in range(len(feats) - 2, -1, -1):
                p = self.lateral[i](feats[i]) + F.interpolate(p, scale_factor=2.0, mode="nearest")
                outs.insert(0, self.smooth[i](p))
            return tuple(outs)

    return FPN()


def torch_cat(xs: list[Any]) -> Any:
    import torch

    return torch.cat(xs, dim=1)


def resnet50(
    width: int = 64, num_classes: int = 1000, blocks: tuple[int, ...] = (3, 4, 6, 3)
) -> Any:
    """torchvision's resnet50 (v1.5: stride on the 3x3 conv); ``width`` scales every stage.

    ``blocks`` per stage is (3, 4, 6, 3) for ResNet-50; tiny variants use fewer, like the
    tiny transformer configs use fewer layers (export time grows with depth).
    """
    nn = _nn()

    Bottleneck = _bottleneck()

    class ResNet(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers: list[Any] = []
            cin = width
            for i, n_blocks in enumerate(blocks):
                planes = width * 2**i
                for b in range(n_blocks):
                    layers.append(Bottleneck(cin, planes, 2 if (b == 0 and i > 0) else 1))
                    cin = planes * 4
            self.layers = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.avgpool(self.layers(x))
            return self.fc(x.flatten(1))

    return ResNet()


# --------------------------------------------------------------------------- MobileNetV2
def _divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def mobilenet_v2(
    width_mult: float = 1.0, num_classes: int = 1000, max_repeats: int | None = None
) -> Any:
    """torchvision's mobilenet_v2 (inverted residuals, ReLU6, 1280-wide head).

    ``max_repeats`` caps the blocks per stage (tiny variants: export time grows with depth).
    """
    nn = _nn()

    def cbr(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )

    class InvertedResidual(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers: list[Any] = [] if expand == 1 else [cbr(cin, hidden, 1)]
            layers += [
                cbr(hidden, hidden, 3, stride, groups=hidden),
                nn.Conv2d(hidden, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x: Any) -> Any:
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            cin = _divisible(32 * width_mult)
            last = _divisible(1280 * max(1.0, width_mult))
            feats: list[Any] = [cbr(3, cin, 3, 2)]
            for t, c, n, s in (
                (1, 16, 1, 1),
                (6, 24, 2, 2),
                (6, 32, 3, 2),
                (6, 64, 4, 2),
                (6, 96, 3, 1),
                (6, 160, 3, 2),
                (6, 320, 1, 1),
            ):
                cout = _divisible(c * width_mult)
                for i in range(min(n, max_repeats or n)):
                    feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                    cin = cout
            feats.append(cbr(cin, last, 1))
            self.features = nn.Sequential(*feats)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

        def forward(self, x: Any) -> Any:
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(x.flatten(1))

    return MobileNetV2()


# --------------------------------------------------------------------------- U-Net
def unet(base: int = 64, in_ch: int = 3, out_ch: int = 1) -> Any:
    """Classic 4-level U-Net with padded 3x3 convs, BatchNorm and transposed-conv upsampling.

    Activation-heavy by design: at 512x512 every full-resolution feature map is
    ``base`` x 1 MiB, and the skip tensors stay alive until the decoder needs them.
    """
    nn = _nn()
    import torch

    def double(cin: int, cout: int) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    class UNet(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            chans = [base * 2**i for i in range(5)]
            self.inc = double(in_ch, chans[0])
            self.downs = nn.ModuleList(double(chans[i], chans[i + 1]) for i in range(4))
            self.ups = nn.ModuleList(
                nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2) for i in reversed(range(4))
            )
            self.decs = nn.ModuleList(double(chans[i] * 2, chans[i]) for i in reversed(range(4)))
            self.pool = nn.MaxPool2d(2)
            self.outc = nn.Conv2d(chans[0], out_ch, 1)

        def forward(self, x: Any) -> Any:
            skips = [self.inc(x)]
            for down in self.downs:
                skips.append(down(self.pool(skips[-1])))
            x = skips.pop()
            for up, dec in zip(self.ups, self.decs, strict=True):
                x = dec(torch.cat([skips.pop(), up(x)], dim=1))
            return self.outc(x)

    return UNet()


# --------------------------------------------------------------------------- multi-branch
def multibranch(
    width: int = 48,
    expand: int = 6,
    num_classes: int = 1000,
    cells_per_stage: tuple[int, int, int] = (3, 3, 2),
) -> Any:
    """Irregular NASNet/Inception-like net whose activation peak depends on execution order.

    Each cell reads the two previous cell outputs (NASNet's h[i-1], h[i-2]) and runs four
    branches of different depth that each *expand* to ``expand`` x channels (a big tensor)
    and then *reduce* it, plus a pooling branch. ``forward`` computes every branch's big
    tensor before reducing any, so the exported file lists all expansions first: an order
    that follows the file holds them all at once, one that interleaves branches holds one.
    Measured (docs/models.md): ORT's run peak differs between its DEFAULT and PRIORITY_BASED
    orders on this net, so the schedule matters here.
    """
    nn = _nn()
    import torch

    def conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        )

    class Branch(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, cin: int, cout: int, k: int, depth: int) -> None:
            super().__init__()
            hidden = cin * expand
            self.expand = nn.Sequential(conv_bn(cin, hidden, 1), nn.ReLU(inplace=True))
            red: list[Any] = []
            for _ in range(depth):  # separable convs on the wide tensor: different depths
                red += [conv_bn(hidden, hidden, k, groups=hidden), nn.ReLU(inplace=True)]
            red.append(conv_bn(hidden, cout, 1))
            self.reduce = nn.Sequential(*red)

    class Cell(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, c_prev2: int, c_prev: int, c: int, stride: int) -> None:
            super().__init__()
            self.pre0 = nn.Sequential(nn.ReLU(), conv_bn(c_prev2, c, 1))
            self.pre1 = nn.Sequential(nn.ReLU(), conv_bn(c_prev, c, 1))
            self.stride = stride
            specs = ((1, 1, 0), (3, 1, 1), (5, 1, 0), (3, 2, 1))  # (kernel, depth, input)
            self.branches = nn.ModuleList(Branch(c, c, k, d) for k, d, _ in specs)
            self.inputs = [i for _, _, i in specs]
            self.pool = nn.MaxPool2d(3, 1, 1)
            self.project = conv_bn(5 * c, c, 1, stride)

        def forward(self, h_prev2: Any, h_prev: Any) -> Any:
            if h_prev2.shape[-1] != h_prev.shape[-1]:
                h_prev2 = nn.functional.avg_pool2d(h_prev2, 2)
            states = [self.pre0(h_prev2), self.pre1(h_prev)]
            bigs = [b.expand(states[i]) for b, i in zip(self.branches, self.inputs, strict=True)]
            outs = [b.reduce(t) for b, t in zip(self.branches, bigs, strict=True)]
            outs.append(self.pool(states[1]))
            return self.project(torch.cat(outs, dim=1))

    class MultiBranch(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(conv_bn(3, width, 3, 2), nn.ReLU(inplace=True))
            cells = []
            c_prev2 = c_prev = width
            c = width
            for stage, n in enumerate(cells_per_stage):
                for j in range(n):
                    stride = 2 if (j == n - 1 and stage < 2) else 1
                    cells.append(Cell(c_prev2, c_prev, c, stride))
                    c_prev2, c_prev = c_prev, c
                c *= 2 if stage < 2 else 1
            self.cells = nn.ModuleList(cells)
            self.fc = nn.Linear(c_prev, num_classes)
            self._c = c

        def forward(self, x: Any) -> Any:
            h2 = h1 = self.stem(x)
            for cell in self.cells:
                h2, h1 = h1, cell(h2, h1)
            return self.fc(nn.functional.adaptive_avg_pool2d(h1, 1).flatten(1))

    return MultiBranch()


# --------------------------------------------------------------------------- specs
def _randomize_bn(module: Any, seed: int) -> Any:
    """Seeded non-trivial BN statistics, so folding Conv+BN changes real numbers."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            n = m.num_features
            assert m.running_mean is not None and m.running_var is not None
            m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
            m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
            m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
    return module


def _maker(
    factory: Callable[[], Any], shape: tuple[int, ...], output: str | tuple[str, ...], seed: int
) -> Any:
    def make() -> Any:
        import torch

        module = _randomize_bn(seeded(seed, factory), seed)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        names = [output] if isinstance(output, str) else list(output)
        return torch_export(module, {"input": x}, names, positional=True)

    return make


@dataclass(frozen=True)
class Cnn:
    """One CNN of the catalogue: a torch factory exported at one static input shape."""

    name: str
    description: str
    factory: Callable[[], Any]
    shape: tuple[int, ...]
    family: str = "cnn"
    tags: tuple[str, ...] = ()
    output: str | tuple[str, ...] = "logits"
    seed: int = 0
    version: int = 1

    def spec(self) -> ModelSpec:
        return ModelSpec(
            name=self.name,
            description=self.description,
            family=self.family,
            tags=(self.family, "embedded", *self.tags),
            source=f"torch:{self.name}:seed{self.seed}",
            make=_maker(self.factory, self.shape, self.output, self.seed),
            feeds=(Feed("input", self.shape, "float32"),),
            seed=self.seed,
            extra={"architecture": self.description},
            version=self.version,
        )


HIGH_RES = ("activation-heavy", "high-res")
TINY = ("tiny", "ci")
# In ``python -m models list`` order.
CATALOGUE = (
    Cnn("resnet50", "ResNet-50 v1.5, batch 1, 224x224", resnet50, (1, 3, 224, 224)),
    Cnn("resnet50-b16", "ResNet-50 v1.5, batch 16, 224x224", resnet50, (16, 3, 224, 224)),
    Cnn("mobilenetv2", "MobileNetV2 (width 1.0), batch 1, 224x224", mobilenet_v2, (1, 3, 224, 224)),
    Cnn(
        "resnet50-960",
        "ResNet-50 v1.5 at batch 1, 960x960: a detector backbone's high-resolution activations",
        resnet50,
        (1, 3, 960, 960),
        tags=HIGH_RES,
    ),
    Cnn(
        "deeplab-800",
        "DeepLabv3-like segmenter: ResNet-50 at output stride 16 (dilated stage 4), ASPP, "
        "batch 1, 800x800",
        deeplab,
        (1, 3, 800, 800),
        tags=HIGH_RES,
        output="mask",
    ),
    Cnn(
        "fpn-800",
        "ResNet-50 + FPN (P2..P5, top-down nearest upsampling + lateral adds), batch 1, 800x800",
        fpn,
        (1, 3, 800, 800),
        tags=HIGH_RES,
        output=("p2", "p3", "p4", "p5"),
    ),
    Cnn(
        "unet",
        "U-Net (base 64, 4 levels), batch 1, 512x512, activation-heavy",
        unet,
        (1, 3, 512, 512),
        tags=("activation-heavy",),
        output="mask",
    ),
    Cnn(
        "multibranch",
        "NASNet/Inception-like multi-branch cells (order-sensitive peak), batch 1, 224x224",
        multibranch,
        (1, 3, 224, 224),
        family="multibranch",
        tags=("order-sensitive",),
    ),
    Cnn(
        "resnet50-tiny",
        "ResNet bottleneck layout at 1/8 width, 1 block per stage, batch 2, 64x64",
        lambda: resnet50(width=8, num_classes=10, blocks=(1, 1, 1, 1)),
        (2, 3, 64, 64),
        tags=TINY,
    ),
    Cnn(
        "mobilenetv2-tiny",
        "MobileNetV2 at width 0.25, 1 block per stage, batch 1, 64x64",
        lambda: mobilenet_v2(width_mult=0.25, num_classes=10, max_repeats=1),
        (1, 3, 64, 64),
        tags=TINY,
        version=2,
    ),
    Cnn(
        "unet-tiny",
        "U-Net (base 8), batch 1, 64x64",
        lambda: unet(base=8),
        (1, 3, 64, 64),
        tags=(*TINY, "activation-heavy"),
        output="mask",
    ),
    Cnn(
        "multibranch-tiny",
        "multi-branch cells at width 8, 1 cell per stage, batch 1, 32x32",
        lambda: multibranch(width=8, num_classes=10, cells_per_stage=(1, 1, 1)),
        (1, 3, 32, 32),
        family="multibranch",
        tags=(*TINY, "order-sensitive"),
    ),
)
for _cnn in CATALOGUE:
    register(_cnn.spec())
