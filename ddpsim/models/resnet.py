"""``ddpsim.models.resnet:resnet50`` (and ``:resnet18``): ResNets written here, for GPU checks at real size.

He et al. 2016 in torchvision's layout (v1.5: the stride on the 3x3 conv), built without
torchvision: the same 161 parameter tensors in the same order and shapes as
``ddpsim.sim.archs.resnet50`` (25,557,032 parameters, about 97.5 MiB of fp32 gradients, so
four buckets under torch's default cap). It is not in the zoo: a ResNet-50 step takes seconds on
a CPU core. Record it on a GPU with ``--model ddpsim.models.resnet:resnet50``. ``resnet18`` has torchvision's
ResNet-18 layout (62 tensors), the model of the bundled H100 gloo profiles (``import --model``).

Inputs are synthetic 3x224x224 images and random labels of 1000 classes, both from a local
generator per (iteration, rank) like the zoo's data; only the time matters here.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpsim.models._data import batch_generator
from ddpsim.models.contract import Training

N_CLASSES = 1000
IMAGE = 224  # pixels per side, as in ImageNet training
BATCH = 32  # samples per rank per step (a common per-GPU ResNet-50 batch)
LAYERS = ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))  # (blocks, width, stride) per stage


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (with the stride), 1x1 expand by 4, each with BatchNorm; a shortcut."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.downsample = None
        if stride != 1 or cin != width * 4:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(width * 4))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, (blocks, width, stride) in enumerate(LAYERS, 1):
            stage = []
            for b in range(blocks):
                stage.append(Bottleneck(cin, width, stride if b == 0 else 1))
                cin = width * 4
            setattr(self, f"layer{i}", nn.Sequential(*stage))
        self.fc = nn.Linear(cin, N_CLASSES)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, padding=1)
        for i in range(1, len(LAYERS) + 1):
            h = getattr(self, f"layer{i}")(h)
        return self.fc(h.mean(dim=(2, 3)))


def resnet50() -> Training:
    """ResNet-50 on synthetic 3x224x224 images, batch 32, cross-entropy over 1000 classes."""

    def batch(iteration: int, rank: int, world_size: int, n: int):
        g = batch_generator(50_000, iteration, rank)
        return (torch.randn(n, 3, IMAGE, IMAGE, generator=g),
                torch.randint(0, N_CLASSES, (n,), generator=g))

    return Training(ResNet50(), batch, F.cross_entropy, default_batch_size=BATCH)


class BasicBlock(nn.Module):
    """Two 3x3 convs (the first with the stride), each with BatchNorm; a shortcut (ResNet-18/34)."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = None
        if stride != 1 or cin != width:
            self.downsample = nn.Sequential(nn.Conv2d(cin, width, 1, stride, bias=False), nn.BatchNorm2d(width))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(ResNet50):
    """torchvision's ``resnet18`` layout: 62 parameter tensors, 11,689,512 parameters."""

    def __init__(self):
        nn.Module.__init__(self)
        self.conv1 = nn.Conv2d(3, 64, 7, 2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, (width, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), 1):
            setattr(self, f"layer{i}", nn.Sequential(BasicBlock(cin, width, stride), BasicBlock(width, width, 1)))
            cin = width
        self.fc = nn.Linear(cin, N_CLASSES)


def resnet18() -> Training:
    """ResNet-18 (torchvision's layout) on synthetic 3x224x224 images, batch 32."""
    return Training(ResNet18(), resnet50().batch, F.cross_entropy, default_batch_size=BATCH)
