"""Which attention kernel a Qwen-VL backbone runs, and the project's own: ``"varlen"``.

transformers 5 (qwen2_vl, qwen2_5_vl, qwen3_vl) runs a vision block's attention in one of two
ways, chosen by a substring test on the vision config's attention name (``"flash" in name``,
``transformers.utils.generic.is_flash_attention_requested``):

* a name containing "flash": ONE call for the whole packed batch, with ``cu_seq_lens_q/k`` and
  ``max_length_q/k`` (the boundaries computed once per forward, no host sync per layer);
* any other name (sdpa, eager, flex_attention): the packed patches are split at ``cu_seqlens``
  (``lengths.tolist()``: a device-to-host sync in every block) and attention is called once
  per image -- for Qwen2.5-VL's windowed blocks once per 112-px window.

``"varlen"`` takes the first route without the flash-attn package: a function registered with
transformers' ``AttentionInterface`` under :data:`VISION_ATTENTION` (a name with "flash" in it,
so the vision tower hands it the packed sequence and its boundaries) is set on the vision config
only; the decoder keeps transformers' sdpa, which already makes one call per layer.  The name
is set through ``set_attn_implementation`` on the loaded model, never at load: at load a name
with "flash" in it is treated as a flash-attn package or Hub kernel and imported (and fails);
the per-sub-model path only checks that the name is registered.

The function (:func:`packed_attention`): on CUDA with fp16/bf16 and a card of compute
capability 8.0 or newer, torch's variable-length kernel (``torch.nn.attention.varlen``,
FlashAttention-2 inside; no padding); elsewhere the segments are packed into rows as long as
the longest (short ones share a row) and attended in ONE batched
``scaled_dot_product_attention`` call with a block-diagonal mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from vis_embed.errors import ConfigError
from vis_embed.model.network import packed_rows

# The project's default: one attention call per vision block for the whole batch (see above).
VARLEN = "varlen"
# The name registered with transformers' AttentionInterface and set on the vision config.  It
# must contain "flash": that substring is how transformers' vision towers pick their
# variable-length calling convention (cu_seq_lens_q/k, max_length_q/k).
VISION_ATTENTION = "vis_embed_flash_varlen"
# Names whose kernel comes from a package that may be missing: usable only when importable.
FLASH_PACKAGES = {"flash_attention_2": "flash-attn", "flash_attention_4": "flash-attn-4"}


def flash_attention_available(name: str) -> bool:
    """Whether transformers' ``name`` (flash_attention_2 / _4) really works here: a CUDA device
    and the right *distribution* installed.  transformers' own checks read the distribution
    name, so flash-attn-4 (which installs a ``flash_attn/`` folder without ``__init__.py``, so
    ``import flash_attn`` succeeds) is not mistaken for flash-attn 2."""
    from transformers.utils import import_utils

    check = {"flash_attention_2": import_utils.is_flash_attn_2_available,
             "flash_attention_4": import_utils.is_flash_attn_4_available}.get(name)
    return bool(check is not None and torch.cuda.is_available() and check())


def require_flash_package(name: str, needed_for: str) -> None:
    """Raise ConfigError when the package behind ``name`` (flash_attention_2 / _4) is not
    installed: the *distribution* is looked up (no import, no CUDA needed -- a recipe is checked
    on any machine), since a ``flash_attn`` folder may come from flash-attn-4 alone."""
    from importlib import metadata

    package = FLASH_PACKAGES.get(name)
    if package is None:
        return
    try:
        metadata.distribution(package)
    except metadata.PackageNotFoundError:
        extra = " (pip install 'vis_embed[gpu]')" if name == "flash_attention_2" else ""
        raise ConfigError(f"{needed_for}: attn_implementation {name!r} needs the {package} package, which is not "
                          f"installed{extra}; leave it unset for {VARLEN!r} (one attention call per vision block "
                          f"from torch's own kernels)") from None


def resolve_attn_implementation(requested: str | None, device: torch.device) -> str:
    """The one rule for the attention kernel.  None: on CUDA flash_attention_2 when flash-attn 2
    is really installed, else :data:`VARLEN`; on any other device transformers' ``sdpa`` (by
    measurement: on a CPU, where torch has no variable-length kernel, one padded call per block
    encodes mixed image sizes 2-10% slower than sdpa's per-image calls; docs/benchmarks.md,
    attention_compare).  A flash_attention_2/4 that is not importable here is a ConfigError
    naming the package; any other name is passed to transformers as given."""
    if requested is None:
        if device.type != "cuda":
            return "sdpa"
        return "flash_attention_2" if flash_attention_available("flash_attention_2") else VARLEN
    if requested in FLASH_PACKAGES and not flash_attention_available(requested):
        raise ConfigError(f"attn_implementation {requested!r} needs the {FLASH_PACKAGES[requested]} package and "
                          f"a CUDA device; neither is usable here (leave it unset for {VARLEN!r}: one attention "
                          f"call per vision block from torch's own kernels)")
    return requested


def load_attn_implementation(name: str) -> str:
    """What ``from_pretrained(attn_implementation=...)`` gets for ``name``: :data:`VARLEN` loads
    as sdpa and is switched by :func:`set_attention` after loading (see the module docstring)."""
    return "sdpa" if name == VARLEN else name


def set_attention(backbone: torch.nn.Module, name: str) -> None:
    """Switch a loaded Qwen-VL backbone (peft-wrapped or not) to attention ``name``."""
    model = backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone
    if name != VARLEN:
        model.set_attn_implementation(name)
        return
    register()
    model.set_attn_implementation({"": "sdpa", "text_config": "sdpa", "vision_config": VISION_ATTENTION})


def attention_name(backbone: torch.nn.Module) -> str | None:
    """The attention ``name`` a backbone runs (as :func:`set_attention` takes it)."""
    config = getattr(backbone, "config", None)
    vision = getattr(config, "vision_config", None)
    if getattr(vision, "_attn_implementation", None) == VISION_ATTENTION:
        return VARLEN
    return getattr(config, "_attn_implementation", None)


def register() -> None:
    """Register :func:`packed_attention` with transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(VISION_ATTENTION, packed_attention)


def packed_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     cu_seq_lens_q: torch.Tensor | None = None, cu_seq_lens_k: torch.Tensor | None = None,
                     max_length_q: int | None = None, max_length_k: int | None = None,
                     is_causal: bool = False, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Non-causal attention over the packed segments ``cu_seq_lens_q`` of ``query`` / ``key`` /
    ``value`` (each ``(1, heads, tokens, head_dim)``, as the vision towers call it); returns
    ``((1, tokens, heads, head_dim), None)`` like transformers' flash functions."""
    if cu_seq_lens_q is None or max_length_q is None or is_causal or attention_mask is not None:
        raise ConfigError(f"{VISION_ATTENTION} serves the Qwen-VL vision towers only (packed, non-causal "
                          f"attention with cu_seq_lens); got another call")
    if cu_seq_lens_k is not None and cu_seq_lens_k is not cu_seq_lens_q \
            and not torch.equal(cu_seq_lens_k, cu_seq_lens_q):
        raise ConfigError(f"{VISION_ATTENTION}: queries and keys must share their segments")
    q, k, v = (tensor[0].transpose(0, 1) for tensor in (query, key, value))  # (tokens, heads, dim)
    if dropout and module.training:
        raise ConfigError(f"{VISION_ATTENTION} does not implement attention dropout (Qwen-VL's is 0)")
    if torch.compiler.is_compiling():  # a compiled vision block (model/network/compile_blocks.py): one opaque op
        out = torch.ops.vis_embed.packed_attention(q, k, v, cu_seq_lens_q, max_length_q, scaling)
    else:
        out = _packed(q, k, v, cu_seq_lens_q, int(max_length_q), scaling)
    return out.unsqueeze(0), None


def _packed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
            scaling: float | None) -> torch.Tensor:
    if _varlen_kernel_usable(q):
        return _varlen(q, k, v, cu_seqlens, max_len, scaling)
    return packed_rows.padded_attention(q, k, v, cu_seqlens, max_len, scaling)


@torch.library.custom_op("vis_embed::packed_attention", mutates_args=())
def _packed_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
               scaling: float | None) -> torch.Tensor:
    """:func:`_packed` as one operator that torch.compile does not trace into: its row plan is
    host-side Python (a compiled vision block keeps one graph, no break) and both kernels stay
    as they are.  Its backward is :func:`_packed_backward_op` (a compiled block that trains)."""
    return _packed(q, k, v, cu_seqlens, max_len, scaling).contiguous()


@_packed_op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
      scaling: float | None) -> torch.Tensor:
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@torch.library.custom_op("vis_embed::packed_attention_backward", mutates_args=())
def _packed_backward_op(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        cu_seqlens: torch.Tensor, max_len: int,
                        scaling: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`_packed_op` for q, k and v: the forward run again under autograd
    and differentiated -- through torch's own backward of whichever kernel :func:`_packed` picks
    (varlen_attn's, or SDPA's over the padded rows), so no attention backward is written here.
    Opaque to torch.compile like the forward (the row plan is host-side); the one extra attention
    forward is what flash-style kernels recompute in their backward anyway."""
    with _autograd_recorded(), torch.enable_grad():
        qkv = [tensor.detach().requires_grad_() for tensor in (q, k, v)]
        out = _packed(*qkv, cu_seqlens, max_len, scaling)
        dq, dk, dv = torch.autograd.grad(out, qkv, grad)
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


def _autograd_recorded() -> Any:
    """A guard under which autograd records again inside an operator's body, which the dispatcher
    runs below the autograd keys (they are in the thread's exclude set there).  Not torch.func.vjp,
    which records below them: torch's varlen_attn is itself a custom operator whose autograd is
    an ``autograd.Function`` without ``setup_context``, which functorch refuses (measured on an
    H200, torch 2.11: the compiled training step failed there; SDPA's native backward did not)."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for key in (torch._C.DispatchKey.AutogradFunctionality, torch._C.DispatchKey.AutogradOther,
                torch._C.DispatchKey.AutogradNestedTensor, torch._C.DispatchKey.ADInplaceOrView):
        excluded = excluded.remove(key)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded)


@_packed_backward_op.register_fake
def _(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
      max_len: int, scaling: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.empty_like(tensor, memory_format=torch.contiguous_format)  # type: ignore[return-value]
                 for tensor in (q, k, v))


def _save_for_backward(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    q, k, v, cu_seqlens, max_len, scaling = inputs
    ctx.save_for_backward(q, k, v, cu_seqlens)
    ctx.max_len, ctx.scaling = max_len, scaling


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    q, k, v, cu_seqlens = ctx.saved_tensors
    dq, dk, dv = torch.ops.vis_embed.packed_attention_backward(grad.contiguous(), q, k, v, cu_seqlens,
                                                                ctx.max_len, ctx.scaling)
    return dq, dk, dv, None, None, None


_packed_op.register_autograd(_backward, setup_context=_save_for_backward)


def _varlen_kernel_usable(q: torch.Tensor) -> bool:
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16):
        return False
    try:
        from torch.nn.attention import varlen  # noqa: F401  (torch >= 2.10)
    except ImportError:
        return False
    return torch.cuda.get_device_capability(q.device) >= (8, 0)


_FA4_CHECKED: list[bool] = []  # whether use_flash_attention_4 ran in this process (and its answer)


def use_flash_attention_4(device: torch.device) -> bool:
    """Route torch's flash-attention kernels (the variable-length vision call and the decoder's
    SDPA) to FlashAttention-4 when the ``flash-attn-4`` distribution is installed and the card is
    a Hopper or Blackwell (compute capability 9.x / 10.x), through torch's own switch
    (``torch.nn.attention.activate_flash_attention_impl("FA4")``; process-wide, once).  Without
    the package, or on another card, nothing changes.  Returns whether FA4 is active."""
    if _FA4_CHECKED:
        return _FA4_CHECKED[0]
    from importlib import metadata

    active = False
    try:
        metadata.distribution(FLASH_PACKAGES["flash_attention_4"])
        if torch.cuda.get_device_capability(device)[0] in (9, 10):
            from torch.nn.attention import activate_flash_attention_impl

            activate_flash_attention_impl("FA4")
            active = True
    except (metadata.PackageNotFoundError, ImportError, RuntimeError, ValueError):
        active = False  # not installed, no such switch in this torch, or its kernels do not load
    _FA4_CHECKED.append(active)
    return active


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
            scaling: float | None) -> torch.Tensor:
    from torch.nn.attention.varlen import varlen_attn

    use_flash_attention_4(q.device)
    cu = cu_seqlens.to(torch.int32)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernel's stride checks (no-op when so)
    # Positional arguments only: varlen_attn's keyword arguments changed between torch 2.10 and
    # 2.12.  The default scale is head_dim ** -0.5, which is what the vision towers pass.
    if scaling is None or abs(scaling - q.shape[-1] ** -0.5) < 1e-12:
        return varlen_attn(q, k, v, cu, cu, max_len, max_len)
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scaling)


# Operators that each run one attention (the entry points; what they call inside is not counted
# again): torch's SDPA, its CUDA variable-length op, the kernels both dispatch to, flash-attn's.
ATTENTION_OPS = frozenset({
    "aten::scaled_dot_product_attention", "torch_attn::_varlen_attn", "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward", "aten::_cudnn_attention_forward",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_cudnn_attention",
    "flash_attn::_flash_attn_varlen_forward", "flash_attn::_flash_attn_forward",
})


def count_attention_calls(run: Callable[[], object]) -> int:
    """How many attention operators ``run()`` executes, as the torch profiler records them: an
    operator of :data:`ATTENTION_OPS` called from inside another one is the same attention."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    count = 0
    for event in profiler.events():
        if event.name not in ATTENTION_OPS:
            continue
        parent = event.cpu_parent
        while parent is not None and parent.name not in ATTENTION_OPS:
            parent = parent.cpu_parent
        count += parent is None
    return count
