"""The vision patch embedding as one matrix product.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL embed patches with a ``Conv3d`` whose kernel equals its
stride, applied to inputs that are already cut into single patches (``N x C x T x P x P``).
Each output is then exactly ``weight.view(out, -1) @ patch.view(-1)``: a linear layer.  On
CPU oneDNN's convolution path runs that at a fraction of the GEMM rate (57 ms vs ~12 ms for
1,564 patches at Qwen2-VL-2B's width, 4% of an encode: docs/benchmarks.md), so
:func:`use_matmul_patch_embedding` switches such convolutions to :class:`PatchwiseConv3d`.

The module keeps its class's parameters, names and state dict (it *is* a ``Conv3d``), so
checkpoints, peft and ``save_pretrained`` see no difference; an input that is not a stack of
single patches takes the ordinary convolution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class PatchwiseConv3d(torch.nn.Conv3d):
    """A ``Conv3d`` with kernel == stride, computed as ``F.linear`` when each input is one patch."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002  (nn.Module's name)
        if input.dim() != 5 or tuple(input.shape[2:]) != tuple(self.kernel_size):
            return super().forward(input)
        patches = input.shape[0]
        weight = self.weight.reshape(self.out_channels, -1)
        return F.linear(input.reshape(patches, -1), weight, self.bias).view(patches, self.out_channels, 1, 1, 1)


def _is_patchwise(module: torch.nn.Module) -> bool:
    return (type(module) is torch.nn.Conv3d and tuple(module.kernel_size) == tuple(module.stride)
            and all(p == 0 for p in module.padding) and all(d == 1 for d in module.dilation)
            and module.groups == 1 and module.padding_mode == "zeros")


def use_matmul_patch_embedding(model: torch.nn.Module) -> int:
    """Switch every patch-embedding ``Conv3d`` (kernel == stride, no padding) of ``model`` to
    :class:`PatchwiseConv3d`; returns how many were switched."""
    switched = 0
    for module in model.modules():
        if _is_patchwise(module):
            module.__class__ = PatchwiseConv3d
            switched += 1
    return switched
