"""Forward rate and training-chunk time of one model, transformers' sdpa path against ours
("varlen", vis_embed/model/network/attention.py) side by side in the same process (issue 35 item 5).
Used by gpu_encode.py (the published sizes on a GPU) and attention_compare.py (tiny
checkpoints on a CPU); not a script itself.

- **rate**: a batch of square images (448 px: exactly 256 visual tokens) with the query
  instruction, prepared once and kept on the device; ``EmbeddingModel.forward`` timed after two
  warm-ups, median of ``repeats``, for each attention in turn on the same weights; plus the
  attention operators one forward runs (torch profiler, ``count_attention_calls``) and the
  smallest cosine between the two paths' vectors.
- **useful FLOPs** (for the share of the GEMM peak): 2 x the linear layers' weights x the
  tokens they see (vision blocks: every patch; the merger: a quarter of them; the decoder: every
  real token), attention left out, as in every MFU figure.
- **training chunk**: GradCache's two passes over a chunk of ``chunk`` members (a forward without
  graph, then a forward with graph and its backward), GPU seconds per step and rank
  = members per rank / chunk x that; when a plan runs the plain path (both sides in one
  forward), one forward with graph and its backward over all the rank's members.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from encode_efficiency import synchronize
from prepare_throughput import photo

from vis_embed.model.network.attention import VARLEN, count_attention_calls, set_attention
from vis_embed.model.network.embedding_model import EmbeddingModel

QUERY_INSTRUCTION = "Find the same object as the one in the given image."
ATTENTIONS = ("sdpa", VARLEN)  # transformers' own path, ours


def timed(function: Any, device: torch.device, repeats: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        function()
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        function()
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def alternating(function: Any, model: EmbeddingModel, device: torch.device, repeats: int,
                warmup: int = 2) -> dict[str, list[float]]:
    """Seconds of ``function()`` under each of ATTENTIONS, the attentions taking turns in every
    repeat (a machine's drift then hits both alike); leaves ours set."""
    seconds: dict[str, list[float]] = {name: [] for name in ATTENTIONS}
    for repeat in range(warmup + repeats):
        for name in ATTENTIONS:
            set_attention(model.backbone, name)
            synchronize(device)
            started = time.perf_counter()
            function()
            synchronize(device)
            if repeat >= warmup:
                seconds[name].append(time.perf_counter() - started)
    set_attention(model.backbone, VARLEN)
    return seconds


def square_images(count: int, side: int) -> list[dict[str, Any]]:
    """Photo-like ``side`` x ``side`` images (448: exactly 256 visual tokens)."""
    return [{"image": photo(side, side, seed=1000 + number)} for number in range(count)]


def device_batch(model: EmbeddingModel, items: list[dict[str, Any]]) -> tuple[list[Any], dict[str, torch.Tensor]]:
    prepared = model.prepare(items, QUERY_INSTRUCTION)
    return prepared, {key: value.to(model.device) for key, value in model.collate(prepared).items()}


def _linear_weights(module: torch.nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear))


def useful_flops(model: EmbeddingModel, batch: dict[str, torch.Tensor]) -> float:
    """2 x linear weights x the tokens through them (see the module docstring)."""
    base = model.base_model()
    patches = int(batch["image_grid_thw"].prod(-1).sum()) if "image_grid_thw" in batch else 0
    merger = getattr(base.visual, "merger", None)
    merger_weights = _linear_weights(merger) if merger is not None else 0
    vision = (_linear_weights(base.visual) - merger_weights) * patches + merger_weights * patches / 4
    return 2.0 * (vision + _linear_weights(base.language_model) * int(batch["attention_mask"].sum()))


def rates_side_by_side(model: EmbeddingModel, batch_size: int, repeats: int, side: int,
                       peak_flops: float | None) -> dict[str, Any]:
    """Forward images/s, attention operators and share of ``peak_flops`` for each of ATTENTIONS."""
    prepared, batch = device_batch(model, square_images(batch_size, side))
    flops = useful_flops(model, batch)
    tokens = int(batch["attention_mask"].sum()) // batch_size
    report: dict[str, Any] = {"batch_size": batch_size, "tokens_per_item": tokens,
                              "visual_tokens_per_item": int(prepared[0].image_grid_thw.prod()) // 4,
                              "useful_tflop_per_batch": flops / 1e12}
    vectors, calls = {}, {}
    for name in ATTENTIONS:
        set_attention(model.backbone, name)
        with torch.inference_mode():
            vectors[name] = model(**batch).float()
            calls[name] = count_attention_calls(lambda: model(**batch))
    with torch.inference_mode():
        times = alternating(lambda: model(**batch), model, model.device, repeats)
    for name in ATTENTIONS:
        seconds = times[name]
        median = statistics.median(seconds)
        report[name] = {"images_per_s": batch_size / median, "seconds_median": median,
                        "seconds_spread": [min(seconds), max(seconds)], "attention_calls": calls[name],
                        "useful_tflops": flops / median / 1e12,
                        "share_of_peak": flops / median / peak_flops if peak_flops else None}
    set_attention(model.backbone, VARLEN)
    report["min_cosine"] = float((vectors["sdpa"] * vectors[VARLEN]).sum(-1).min())
    report["speedup"] = report[VARLEN]["images_per_s"] / report["sdpa"]["images_per_s"]
    return report


def describe_rates(name: str, report: dict[str, Any]) -> str:
    parts = [f"{name}: batch {report['batch_size']}, {report['visual_tokens_per_item']} visual / "
             f"{report['tokens_per_item']} tokens an item"]
    for attention in ATTENTIONS:
        row = report[attention]
        share = "" if row["share_of_peak"] is None else f" = {row['share_of_peak']:.0%} of peak"
        parts.append(f"  {attention:6s}: {row['images_per_s']:8.2f} images/s ({row['seconds_spread'][0]:.4f}-"
                     f"{row['seconds_spread'][1]:.4f} s a batch), {row['attention_calls']} attention calls, "
                     f"{row['useful_tflops']:.2f} TFLOP/s{share}")
    parts.append(f"  ours / sdpa: {report['speedup']:.2f}x; min cosine {report['min_cosine']:.6f}")
    return "\n".join(parts)


def chunk_seconds(model: Any, members: list[Any], device: torch.device, repeats: int,
                  replayed: bool = True) -> dict[str, float]:
    """Median seconds of a forward without graph and of a forward with graph + backward."""
    batch = {key: value.to(device) for key, value in model.collate(members).items()}
    cotangent = torch.randn(len(members), model.embedding_dim, device=device)

    def representations() -> None:
        with torch.no_grad():
            model(**batch)

    def graph_and_backward() -> None:
        (model(**batch) * cotangent).sum().backward()

    result = {"forward_backward_s": statistics.median(timed(graph_and_backward, device, repeats))}
    if replayed:
        result["no_graph_forward_s"] = statistics.median(timed(representations, device, repeats))
    model.zero_grad(set_to_none=True)
    return result


def training_side_by_side(recipe_path: Path, checkpoint: Path, device: torch.device, repeats: int, side: int,
                          members_per_rank: int, overrides: list[str] | None = None,
                          probe_auto: bool = True, compiled: bool = False) -> dict[str, Any]:
    """A recipe's GradCache chunk, as the recipe sets it (chunk, checkpointing), under sdpa and
    ours; then ours under ``chunk_size: auto`` / ``gradient_checkpointing: auto`` (the plan the
    probe picks on this card, timed as it would run); with ``compiled`` that plan once more with
    the blocks compiled (``model_options.compile: true``)."""
    from vis_embed.training.memory_plan import AUTO, plan_memory
    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.model_setup import build_training_model

    recipe = load_recipe(recipe_path, overrides=[f"model={checkpoint}", "deepspeed=null",
                                                 f"model_options.attn_implementation={VARLEN}", *(overrides or [])])
    chunk = int(recipe.gradcache.chunk_size)
    model = build_training_model(recipe, device)
    members = model.prepare(square_images(chunk, side), QUERY_INSTRUCTION)
    report: dict[str, Any] = {"recipe": recipe_path.name, "chunk": chunk, "members_per_rank": members_per_rank,
                              "gradient_checkpointing": recipe.model_options.gradient_checkpointing,
                              "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    for name in ATTENTIONS:
        set_attention(model.backbone, name)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        row = chunk_seconds(model, members, device, repeats)
        row["gpu_s_per_step_per_rank"] = members_per_rank / chunk * (row["no_graph_forward_s"]
                                                                      + row["forward_backward_s"])
        row["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        report[name] = row
    report["step_ratio_ours_to_sdpa"] = (report[VARLEN]["gpu_s_per_step_per_rank"]
                                         / report["sdpa"]["gpu_s_per_step_per_rank"])
    if probe_auto:
        set_attention(model.backbone, VARLEN)
        backbone = model.backbone  # transformers 5 names it activation_checkpointing_*, older ones gradient_*
        (getattr(backbone, "activation_checkpointing_disable", None) or backbone.gradient_checkpointing_disable)()
        local = members_per_rank // 2
        plan = plan_memory(model, model.collate, lambda: members, chunk_size=AUTO, gradient_checkpointing=AUTO,
                           local_batch_size=local, device=device)
        plain = plan.chunk_size >= local
        timed_members = model.prepare(square_images(members_per_rank if plain else plan.chunk_size, side),
                                      QUERY_INSTRUCTION)
        row = chunk_seconds(model, timed_members, device, repeats, replayed=not plain)
        row["gpu_s_per_step_per_rank"] = row["forward_backward_s"] if plain else (
            members_per_rank / plan.chunk_size * (row["no_graph_forward_s"] + row["forward_backward_s"]))
        report["auto"] = {"plan": plan.as_dict(), **row,
                          "step_ratio_to_sdpa_recipe": row["gpu_s_per_step_per_rank"]
                          / report["sdpa"]["gpu_s_per_step_per_rank"]}
        if compiled:
            try:
                report["auto_compiled"] = compiled_step(model, timed_members, device, repeats, plain,
                                                        members_per_rank, plan.chunk_size, report)
            except RuntimeError as error:  # Dynamo's and the kernels' failures: the rows above are kept
                report["auto_compiled"] = {"error": f"{type(error).__name__}: {str(error)[:500]}"}
    return report


def compiled_step(model: Any, members: list[Any], device: torch.device, repeats: int, plain: bool,
                  members_per_rank: int, chunk: int, report: dict[str, Any]) -> dict[str, Any]:
    """The auto plan's step again with ``model_options.compile`` (every block compiled, forward and
    backward): its GPU seconds, their ratio to the sdpa recipe's, and the wall time of the first
    calls, where the compilation happens (the warm-up of :func:`chunk_seconds`)."""
    from vis_embed.model.network.compile_blocks import compile_blocks

    compile_blocks(model.base_model(), device)
    started = time.perf_counter()
    row = chunk_seconds(model, members, device, repeats, replayed=not plain)
    row["compile_and_measure_s"] = time.perf_counter() - started
    row["gpu_s_per_step_per_rank"] = row["forward_backward_s"] if plain else (
        members_per_rank / chunk * (row["no_graph_forward_s"] + row["forward_backward_s"]))
    row["step_ratio_to_sdpa_recipe"] = row["gpu_s_per_step_per_rank"] / report["sdpa"]["gpu_s_per_step_per_rank"]
    return row


def describe_training(report: dict[str, Any]) -> str:
    lines = [f"training ({report['recipe']}: chunk {report['chunk']}, checkpointing "
             f"{report['gradient_checkpointing']}, {report['members_per_rank']} members per rank and step)"]
    for name in ATTENTIONS:
        row = report[name]
        lines.append(f"  {name:6s}: no graph {row['no_graph_forward_s']:.3f} s + graph and backward "
                     f"{row['forward_backward_s']:.3f} s -> {row['gpu_s_per_step_per_rank']:.2f} GPU s per step "
                     f"and rank; peak {row['peak_gib']} GiB")
    lines.append(f"  ours / sdpa: {report['step_ratio_ours_to_sdpa']:.2f}")
    if "auto" in report:
        auto = report["auto"]
        lines.append(f"  auto plan: chunk {auto['plan']['chunk_size']}, checkpointing "
                     f"{auto['plan']['gradient_checkpointing']} ({auto['plan']['reason']}) -> "
                     f"{auto['gpu_s_per_step_per_rank']:.2f} GPU s per step and rank "
                     f"({auto['step_ratio_to_sdpa_recipe']:.2f} of the sdpa recipe's)")
    if "auto_compiled" in report:
        compiled = report["auto_compiled"]
        if "error" in compiled:
            return "\n".join([*lines, f"  auto plan, blocks compiled: FAILED ({compiled['error']})"])
        lines.append(f"  auto plan, blocks compiled: {compiled['gpu_s_per_step_per_rank']:.2f} GPU s per step "
                     f"and rank ({compiled['step_ratio_to_sdpa_recipe']:.2f} of the sdpa recipe's); compile "
                     f"and measure {compiled['compile_and_measure_s']:.1f} s")
    return "\n".join(lines)
