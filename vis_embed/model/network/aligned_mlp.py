"""The MLPs with aligned matrices, for inference (``Embedder``).

Qwen2.5-VL's vision MLP has an intermediate size of 3420 (Qwen3-VL's: 4304), not a multiple of
128: in bf16 a row of 3420 is 6840 bytes, not 16-byte aligned, so cuBLAS cannot use its Hopper
kernels for those products (a profile of the 3B forward on an H100 spent 226 ms in Ampere-era
``cutlass_80_tensorop`` kernels).  :class:`AlignedMLP` holds the same weights padded with
zeros to the next multiple of 128 -- exact: a padded unit's input weights and bias are zero, its
activation is act(0) = 0 (SiLU, GELU, QuickGELU), and its output column is zero, so it adds
exactly nothing -- and, where the MLP is gated (Qwen2.5-VL's vision MLP and every decoder MLP:
gate_proj, up_proj), gate and up stacked in one matrix: one product instead of two.  (The
decoders' intermediate sizes -- 8960, 11008, 18944 -- are multiples of 128 already.)

The original shapes stay what everything else sees:

* ``state_dict()`` returns the original keys and shapes (``gate_proj.weight`` (3420, D), ...;
  the padding cut off), and ``load_state_dict`` takes them: ``save_pretrained`` writes the
  checkpoint unchanged (tested);
* the swap is made where a model only embeds (``Embedder``, eval mode), never for training;
  :func:`restore_mlps` puts the original modules back (exactly: the padding is cut off),
  and ``EmbeddingModel.add_lora`` calls it, so LoRA targets the original ``gate_proj`` etc.;
* an MLP whose linears are not plain ``nn.Linear`` (a loaded LoRA adapter's layers) is left as
  it is.

Padded once at load, not in a forward hook: the weights are copied once (the original
parameters are released, so no memory is added beyond the padding, 1% for 3420 -> 3456).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ALIGNMENT = 128  # elements: cuBLAS's fast kernels want 16-byte rows; 128 also fills tensor-core tiles
# (input linears, output linear) of the MLP layouts: gated (Qwen2.5-VL's vision, every decoder), Qwen3-VL's
# vision, Qwen2-VL's vision.
LAYOUTS = ((("gate_proj", "up_proj"), "down_proj"), (("linear_fc1",), "linear_fc2"), (("fc1",), "fc2"))


def alignment_for(device: torch.device) -> int:
    """The padding that pays on ``device``: :data:`ALIGNMENT` for cuBLAS on CUDA; none elsewhere
    (on a CPU the padding is only extra work -- 10% more forward time on the tiny models, whose
    vision MLP grows 192 -> 256 -- while stacking gate and up costs nothing: docs/model.md)."""
    return ALIGNMENT if device.type == "cuda" else 1


def padded_size(size: int, alignment: int = ALIGNMENT) -> int:
    return -(-size // alignment) * alignment


class AlignedMLP(torch.nn.Module):
    """An MLP with its intermediate size padded to :data:`ALIGNMENT` and its input
    linears (gate and up, or fc1) in one matrix; state dict in the original layout."""

    def __init__(self, original: torch.nn.Module, inputs: tuple[str, ...], output: str,
                 alignment: int = ALIGNMENT) -> None:
        super().__init__()
        linears = [getattr(original, name) for name in inputs]
        out_linear = getattr(original, output)
        self.inputs, self.output = inputs, output
        self.size = linears[0].out_features
        self.padded = padded_size(self.size, alignment)
        self.act_fn = getattr(original, "act_fn", None) or original.act
        self.act_name = "act_fn" if hasattr(original, "act_fn") else "act"
        hidden = linears[0].in_features
        weight = linears[0].weight
        w_in = weight.new_zeros(len(linears) * self.padded, hidden)
        b_in = weight.new_zeros(len(linears) * self.padded) if linears[0].bias is not None else None
        w_out = weight.new_zeros(out_linear.out_features, self.padded)
        with torch.no_grad():
            for i, linear in enumerate(linears):
                w_in[i * self.padded:i * self.padded + self.size] = linear.weight
                if b_in is not None:
                    b_in[i * self.padded:i * self.padded + self.size] = linear.bias
            w_out[:, :self.size] = out_linear.weight
        self.in_weight = torch.nn.Parameter(w_in, requires_grad=weight.requires_grad)
        self.in_bias = None if b_in is None else torch.nn.Parameter(b_in, requires_grad=weight.requires_grad)
        self.out_weight = torch.nn.Parameter(w_out, requires_grad=weight.requires_grad)
        self.out_bias = None if out_linear.bias is None else torch.nn.Parameter(out_linear.bias.detach().clone(),
                                                                               requires_grad=weight.requires_grad)
        self._original_class = type(original)
        self._original_extra = {key: value for key, value in vars(original).items()
                                if not key.startswith("_") and key != "training"}
        self._register_state_dict_hook(_original_state_dict)
        self._register_load_state_dict_pre_hook(_from_original_state_dict, with_module=True)

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(hidden_state, self.in_weight, self.in_bias)
        if len(self.inputs) == 2:  # gated: act(gate) * up, from the one product
            gate, up = hidden.split(self.padded, dim=-1)
            hidden = self.act_fn(gate) * up
        else:
            hidden = self.act_fn(hidden)
        return F.linear(hidden, self.out_weight, self.out_bias)

    def original_tensors(self) -> dict[str, torch.Tensor]:
        """The original module's parameters (``gate_proj.weight``, ...), padding cut off."""
        tensors: dict[str, torch.Tensor] = {}
        for i, name in enumerate(self.inputs):
            rows = slice(i * self.padded, i * self.padded + self.size)
            tensors[f"{name}.weight"] = self.in_weight[rows]
            if self.in_bias is not None:
                tensors[f"{name}.bias"] = self.in_bias[rows]
        tensors[f"{self.output}.weight"] = self.out_weight[:, :self.size]
        if self.out_bias is not None:
            tensors[f"{self.output}.bias"] = self.out_bias
        return tensors

    def restored(self) -> torch.nn.Module:
        """The original module (same class, same weights, no padding)."""
        module = self._original_class.__new__(self._original_class)
        torch.nn.Module.__init__(module)
        vars(module).update(self._original_extra)
        tensors = self.original_tensors()
        with torch.no_grad():
            for name in self.inputs + (self.output,):
                weight, bias = tensors[f"{name}.weight"], tensors.get(f"{name}.bias")
                linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None,
                                         device=weight.device, dtype=weight.dtype)
                linear.weight.copy_(weight)
                if bias is not None:
                    linear.bias.copy_(bias)
                linear.requires_grad_(self.in_weight.requires_grad)
                setattr(module, name, linear)
        setattr(module, self.act_name, self.act_fn)
        module.train(self.training)
        return module


def _original_state_dict(module: AlignedMLP, state_dict: dict[str, Any], prefix: str, _metadata: Any) -> None:
    for key in [key for key in state_dict if key.startswith(prefix) and key[len(prefix):].count(".") == 0]:
        del state_dict[key]
    for name, tensor in module.original_tensors().items():
        state_dict[prefix + name] = tensor.detach().contiguous()


def _from_original_state_dict(module: AlignedMLP, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    """Turn the original keys into the padded ones (a state dict saved by either layout loads)."""
    if f"{prefix}{module.output}.weight" not in state_dict:
        return
    in_weight = torch.zeros_like(module.in_weight)
    out_weight = torch.zeros_like(module.out_weight)
    in_bias = None if module.in_bias is None else torch.zeros_like(module.in_bias)
    for i, name in enumerate(module.inputs):
        rows = slice(i * module.padded, i * module.padded + module.size)
        in_weight[rows] = state_dict.pop(f"{prefix}{name}.weight")
        if in_bias is not None:
            in_bias[rows] = state_dict.pop(f"{prefix}{name}.bias")
    out_weight[:, :module.size] = state_dict.pop(f"{prefix}{module.output}.weight")
    state_dict[prefix + "in_weight"], state_dict[prefix + "out_weight"] = in_weight, out_weight
    if in_bias is not None:
        state_dict[prefix + "in_bias"] = in_bias
    if module.out_bias is not None:
        state_dict[prefix + "out_bias"] = state_dict.pop(f"{prefix}{module.output}.bias")


def _layout(module: torch.nn.Module) -> tuple[tuple[str, ...], str] | None:
    for inputs, output in LAYOUTS:
        linears = [getattr(module, name, None) for name in (*inputs, output)]
        if all(type(linear) is torch.nn.Linear for linear in linears) and \
                (hasattr(module, "act_fn") or hasattr(module, "act")):
            return inputs, output
    return None


def _blocks(base_model: PreTrainedModel) -> list[torch.nn.Module]:
    """The vision blocks and decoder layers (each with an ``mlp``) of a Qwen-VL base model."""
    vision = getattr(getattr(base_model, "visual", None), "blocks", None) or []
    decoder = getattr(getattr(base_model, "language_model", None), "layers", None) or []
    return [block for block in [*vision, *decoder] if hasattr(block, "mlp")]


def align_mlps(base_model: PreTrainedModel, alignment: int = ALIGNMENT) -> int:
    """Swap each vision block's and decoder layer's MLP for an :class:`AlignedMLP` where that
    changes something (an intermediate size not a multiple of ``alignment``, or gate and up to
    stack); returns how many were swapped."""
    swapped = 0
    for block in _blocks(base_model):
        layout = _layout(block.mlp)
        if layout is None:
            continue
        inputs, output = layout
        size = getattr(block.mlp, inputs[0]).out_features
        if len(inputs) == 1 and size % alignment == 0:
            continue  # nothing to pad, nothing to stack
        block.mlp = AlignedMLP(block.mlp, inputs, output, alignment)
        swapped += 1
    return swapped


def restore_mlps(base_model: PreTrainedModel) -> int:
    """Put the original MLPs back (before LoRA or training); returns how many."""
    restored = 0
    for block in _blocks(base_model):
        if isinstance(block.mlp, AlignedMLP):
            block.mlp = block.mlp.restored()
            restored += 1
    return restored
