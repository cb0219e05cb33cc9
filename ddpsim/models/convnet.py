"""``convnet``: a small ResNet-style CNN on synthetic 3x32x32 images.

Written in-house (no torchvision). It has BatchNorm2d layers, so the model has
buffers (``running_mean``, ``running_var``, ``num_batches_tracked``) that DDP
broadcasts from rank 0 at construction and, with ``broadcast_buffers=True``
(the default), before every forward.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpsim.models.contract import Training
from ddpsim.models._data import batch_generator, classify, teacher_generator

N_CLASSES = 10


def conv_bn(cin: int, cout: int, stride: int = 1, kernel: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False),
                         nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """Two 3x3 conv+BN layers with an identity (or 1x1 conv+BN) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv_bn(cin, cout, stride)
        self.conv2 = conv_bn(cout, cout)
        self.shortcut = (conv_bn(cin, cout, stride, kernel=1)
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        h = F.relu(self.conv1(x))
        return F.relu(self.conv2(h) + self.shortcut(x))


class ConvNet(nn.Module):
    """stem 3->16 @32x32, blocks 16 @32, 32 @16, 64 @8, global average pool, linear head."""

    def __init__(self, widths=(16, 32, 64)):
        super().__init__()
        self.stem = conv_bn(3, widths[0])
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(cin, w, stride=1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, N_CLASSES)

    def forward(self, x):
        h = self.blocks(F.relu(self.stem(x)))
        return self.head(h.mean(dim=(2, 3)))


def convnet() -> Training:
    """ResNet-style CNN with BatchNorm buffers; batch 32 of 3x32x32 images.

    Images are smooth random fields (Gaussian noise at 8x8, upsampled); labels come
    from a fixed linear teacher on the 8x8 field.
    """
    base = 44_000
    teacher = torch.randn(3 * 8 * 8, N_CLASSES, generator=teacher_generator(base))

    def batch(iteration: int, rank: int, world_size: int, batch_size: int):
        g = batch_generator(base, iteration, rank)
        coarse = torch.randn(batch_size, 3, 8, 8, generator=g)
        x = F.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)
        x = x + 0.1 * torch.randn(x.shape, generator=g)
        return x, classify(coarse, teacher)

    return Training(ConvNet(), batch, F.cross_entropy, default_batch_size=32)
