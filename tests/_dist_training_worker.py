"""Worker for tests/test_distributed_training.py, launched with ``torchrun --nproc_per_node 2``.

Trains the same global batches under DDP, DeepSpeed ZeRO-2 and ZeRO-3 (GradCache on, chunks of
2 local members), each rank holding its contiguous shard, and writes per-step global losses,
the final weights and tau to ``argv[1]`` (rank 0) for comparison with one process.  With
``--full`` it instead trains ``adaptation: full`` under ZeRO-2 and ZeRO-3 (train_tiny_qwen_full); with
``--text-only-rank`` the tiny Qwen-VL with a vision LoRA on batches whose rank-1 chunks lack images
(train_vision_lora).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _training_standin import StandInEncoder, TokenItem, random_members  # noqa: E402

from vis_embed.training.backends import DeepSpeedBackend, TorchBackend  # noqa: E402
from vis_embed.distributed import get_rank, get_world_size, init_distributed  # noqa: E402
from vis_embed.training.gradcache import contrastive_step  # noqa: E402
from vis_embed.training.recipe import GradCacheConfig, OptimizerConfig  # noqa: E402
from vis_embed.training.losses import Temperature, info_nce_loss  # noqa: E402
from vis_embed.training.lr_schedule import lr_lambda  # noqa: E402

GLOBAL_BATCH, STEPS, LR = 8, 3, 1e-2


def global_batches() -> list[tuple[list[TokenItem], list[TokenItem]]]:
    return [(random_members(GLOBAL_BATCH, 10 + s), random_members(GLOBAL_BATCH, 100 + s)) for s in range(STEPS)]


def uneven_batches() -> list[tuple[list[TokenItem], list[TokenItem]]]:
    """Rank 0's half of one length (2 chunks of 2 a side), rank 1's spread: ``max_padding`` 0.1
    closes each of its chunks after one member (4 a side)."""
    lengths = [6, 6, 6, 6] + [8, 5, 3, 2]
    generator = torch.Generator().manual_seed(7)
    return [tuple([TokenItem(torch.randint(1, 50, (n,), generator=generator).tolist()) for n in lengths]
                  for _side in range(2)) for _step in range(STEPS)]


def train(mode: str, chunk_size: int, uneven: bool = False) -> dict:
    """``uneven``: the batches of :func:`uneven_batches` in chunks closed at 10% padding."""
    torch.manual_seed(0)
    model = StandInEncoder(dropout=0.0)
    tau = Temperature(0.05)
    tau_optimizer = torch.optim.AdamW([tau.log_tau], lr=LR, weight_decay=0.0)
    common = dict(optimizer=OptimizerConfig(lr=LR, max_grad_norm=1.0), lr_schedule=lr_lambda(1, STEPS))
    if mode == "torch":
        backend = TorchBackend(model, **common)
    else:
        stage = {"zero2": 2, "zero3": 3}[mode]
        local = GLOBAL_BATCH // get_world_size()
        zero = {"stage": stage, "overlap_comm": False, **({"stage3_param_persistence_threshold": 0} if uneven else {})}
        config = {"train_micro_batch_size_per_gpu": local, "gradient_accumulation_steps": 1,
                  "train_batch_size": GLOBAL_BATCH, "gradient_clipping": 1.0, "zero_optimization": zero,
                  "steps_per_print": 10**9}
        backend = DeepSpeedBackend(model, ds_config=config, **common)
    world, rank = get_world_size(), get_rank()
    local = GLOBAL_BATCH // world
    losses = []
    for queries, candidates in (uneven_batches() if uneven else global_batches()):
        shard = slice(rank * local, (rank + 1) * local)
        result = contrastive_step(backend, model.collate, queries[shard], candidates[shard],
                                  lambda q, c: info_nce_loss(q, c, tau()),
                                  gradcache=GradCacheConfig(chunk_size=chunk_size, max_padding=0.1 if uneven else 1.0),
                                  query_lengths=[x.length for x in queries[shard]],
                                  candidate_lengths=[x.length for x in candidates[shard]])
        backend.step()
        tau_optimizer.step()
        tau_optimizer.zero_grad()
        losses.append(result.loss)
    weights = backend.trainable_state_dict()
    return {"losses": losses, "tau": tau.value, "weights": {k: v.flatten().tolist() for k, v in weights.items()}}


def vision_members() -> tuple[list[dict], list[dict]]:
    """A global batch of 8 queries and 8 candidates for :func:`train_vision_lora`.  Rank 0's half
    (the first 4 of each side): images.  Rank 1's: two image queries and two text-only ones (a
    chunk with images, then one without), and text-only candidates (no image in any chunk)."""
    import numpy as np
    from PIL import Image

    def image(seed: int) -> dict:
        pixels = np.random.default_rng(seed).integers(0, 256, (56, 56, 3), dtype=np.uint8)
        return {"image": Image.fromarray(pixels)}

    queries = [image(i) for i in range(6)] + [{"text": "a small red square"}, {"text": "a blue circle"}]
    candidates = [image(10 + i) for i in range(4)] + [{"text": f"label number {i}"} for i in range(4)]
    return queries, candidates


def train_vision_lora(mode: str, model_path: str, chunk_size: int, adaptation: str = "lora") -> dict:
    """The tiny Qwen-VL with LoRA on the vision tower's blocks too (``adaptation.lora.vision:
    true``; ``adaptation="text-lora"``: the language model's only, the tower frozen) under
    ``mode`` (torch, zero2, zero3 with every weight partitioned), two GradCache steps of
    :func:`vision_members`; the losses and trained weights."""
    from vis_embed.model.network.embedding_model import EmbeddingModel

    torch.manual_seed(0)
    model = EmbeddingModel.from_pretrained(model_path, device="cpu", dtype="float32")
    model.add_lora(r=4, alpha=8, dropout=0.0, vision=adaptation == "lora")
    model.train()
    common = dict(optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=0.0), lr_schedule=lambda step: 1.0)
    world, rank = get_world_size(), get_rank()
    if mode == "torch":
        backend = TorchBackend(model, **common)
    else:
        zero = {"stage": int(mode[-1]), "overlap_comm": False, "stage3_param_persistence_threshold": 0}
        config = {"train_micro_batch_size_per_gpu": GLOBAL_BATCH // world, "gradient_accumulation_steps": 1,
                  "train_batch_size": GLOBAL_BATCH, "gradient_clipping": 0.0, "zero_optimization": zero,
                  "steps_per_print": 10**9}
        backend = DeepSpeedBackend(model, ds_config=config, **common)
    queries, candidates = (model.prepare(side) for side in vision_members())
    local = GLOBAL_BATCH // world
    shard = slice(rank * local, (rank + 1) * local)
    losses = []
    for _step in range(2):
        result = contrastive_step(backend, model.collate, queries[shard], candidates[shard],
                                  lambda q, c: info_nce_loss(q, c, 0.05),
                                  gradcache=GradCacheConfig(chunk_size=chunk_size, max_padding=1.0),
                                  query_lengths=[x.length for x in queries[shard]],
                                  candidate_lengths=[x.length for x in candidates[shard]])
        backend.step()
        losses.append(result.loss)
    weights = backend.trainable_state_dict()
    return {"losses": losses, "weights": {k: v.flatten().tolist() for k, v in weights.items()}}


def train_tiny_qwen(stage: int, model: str, data: str, schedule: str, out: Path, compiled: bool = False) -> dict:
    """The real trainer on the tiny Qwen-VL with the shipped ds_configs/zero{stage}.json (0: DDP);
    ``compiled``: with ``model_options.compile: true`` (every block compiled, forward and backward).

    Then resumes from checkpoint-2 (DeepSpeed optimiser partitions, RNG, tau) and re-runs the
    last step: the final adapter must come out identical.
    """
    from _training_fixtures import tiny_recipe
    from safetensors.torch import load_file

    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    config = Path(__file__).resolve().parents[1] / "ds_configs" / f"zero{stage}.json"
    run_dir = out / f"zero{stage}{'_compiled' if compiled else ''}"
    raw = tiny_recipe(model, data, schedule, run_dir, max_steps=3, gradcache__chunk_size=1, checkpoint__every=2,
                      deepspeed=str(config) if stage else None, model_options__compile=compiled)  # stage 0: DDP
    Trainer(load_recipe(raw=raw)).train()
    if get_rank() != 0:
        Trainer(load_recipe(raw=raw), resume=True).train()
        return {}
    losses = [json.loads(line)["loss"] for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    first = load_file(str(run_dir / "final" / "adapter_model.safetensors"))
    resumed = Trainer(load_recipe(raw=raw), resume=True)
    resumed.train()
    again = load_file(str(run_dir / "final" / "adapter_model.safetensors"))
    resume_diff = max(float((first[k] - again[k]).abs().max()) for k in first)
    from torch._dynamo.utils import counters

    return {"losses": losses, "resume_max_abs_diff": resume_diff, "resumed_at": resumed.start_step,
            "compiled_graphs": counters["stats"]["unique_graphs"]}


def train_tiny_qwen_full(stage: int, model: str, data: str, schedule: str, out: Path) -> dict:
    """``adaptation: full`` under ZeRO-{stage}: 2 steps of the real trainer, then rank 0 loads
    final/ into a fresh model (``from_pretrained``, as a user would) and compares it with the
    trained weights gathered here independently (all at once); then every rank resumes from
    checkpoint-1 (the DeepSpeed module state loaded strictly) and re-runs step 2.

    ZeRO-3 runs with ``stage3_param_persistence_threshold: 0``: with the shipped 100000 nearly
    every weight of the tiny model would stay whole on every rank and a save of the partitioned
    (empty) tensors would go unnoticed.
    """
    import deepspeed
    from _training_fixtures import tiny_recipe

    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    ds_config = json.loads((Path(__file__).resolve().parents[1] / "ds_configs" / f"zero{stage}.json").read_text())
    if stage == 3:
        ds_config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    run_dir = out / f"full_zero{stage}"
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir.parent / f"full_zero{stage}.json"
    if get_rank() == 0:
        config.write_text(json.dumps(ds_config))
    torch.distributed.barrier()
    raw = tiny_recipe(model, data, schedule, run_dir, max_steps=2, gradcache__chunk_size=1, checkpoint__every=1,
                      adaptation="full", deepspeed=str(config))
    trainer = Trainer(load_recipe(raw=raw))
    final = trainer.train()
    backbone = trainer.model.backbone
    parameters = list(backbone.parameters())
    partitioned = sum(p.numel() == 0 for p in parameters)  # ZeRO-3: each rank's module holds empty tensors
    with deepspeed.zero.GatheredParameters(parameters, modifier_rank=None, enabled=stage == 3):
        trained = {n: p.detach().clone() for n, p in backbone.named_parameters()} if get_rank() == 0 else {}
    result: dict = {"partitioned": partitioned, "parameters": len(parameters)}
    result.update(_save_gather(trainer.backend))
    if get_rank() == 0:
        cls = type(backbone)
        saved = cls.from_pretrained(str(final), dtype=torch.float32).state_dict()
        base = cls.from_pretrained(model, dtype=torch.float32).state_dict()
        result.update(
            names_equal=set(trained) <= set(saved),
            max_abs_diff=max(float((saved[n] - t).abs().max()) for n, t in trained.items()),
            changed=sum(not torch.equal(base[n], t) for n, t in trained.items()),
            dtypes=sorted({str(t.dtype) for t in load_file_all(final).values()}))
        first = load_file_all(final)
    torch.distributed.barrier()
    resumed = Trainer(load_recipe(raw=raw), resume=True)
    resumed.train()
    if get_rank() == 0:
        again = load_file_all(final)
        result.update(resumed_at=resumed.start_step,
                      resume_max_abs_diff=max(float((first[k] - again[k]).abs().max()) for k in first))
    return result


def _save_gather(backend: DeepSpeedBackend) -> dict:
    """What the save's gather holds: the most parameter elements gathered at once (each rank
    holds that much of the whole model during it), the total, and each rank's entries / dtypes."""
    import deepspeed

    at_once: list[int] = []
    original = deepspeed.zero.GatheredParameters

    class Recording(original):  # type: ignore[misc,valid-type]
        def __init__(self, params, *args, **kwargs) -> None:
            params = [params] if isinstance(params, torch.Tensor) else list(params)
            at_once.append(sum(getattr(p, "ds_numel", p.numel()) for p in params))
            super().__init__(params, *args, **kwargs)

    deepspeed.zero.GatheredParameters = Recording
    try:
        state = backend.trainable_state_dict(keep_dtype=True)
    finally:
        deepspeed.zero.GatheredParameters = original
    entries: list = [None] * get_world_size()
    torch.distributed.all_gather_object(entries, len(state))
    total = sum(getattr(p, "ds_numel", p.numel()) for p in backend.module.parameters())
    return {"largest_gather": max(at_once, default=0), "total_elements": total, "entries_per_rank": entries,
            "state_dtypes": sorted({str(t.dtype) for t in state.values()})}


def load_file_all(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    paths = sorted(Path(directory).glob("model*.safetensors"))
    return {name: tensor for path in paths for name, tensor in load_file(str(path)).items()}


def main() -> None:
    init_distributed(use_deepspeed=True)
    if sys.argv[2:3] == ["--full"]:  # out, --full, model, data config, schedule, output folder
        model, data, schedule, out = sys.argv[3:7]
        full = {f"full_zero{stage}": train_tiny_qwen_full(stage, model, data, schedule, Path(out)) for stage in (2, 3)}
        if get_rank() == 0:
            Path(sys.argv[1]).write_text(json.dumps(full))
        return
    if sys.argv[2:3] == ["--text-only-rank"]:  # out, --text-only-rank, model, adaptation, zero2 | zero3
        vision = train_vision_lora(sys.argv[5], sys.argv[3], chunk_size=2, adaptation=sys.argv[4])
        if get_rank() == 0:
            Path(sys.argv[1]).write_text(json.dumps(vision))
        return
    if sys.argv[2:3] == ["--uneven"]:  # chunk counts that differ between the ranks, under ZeRO-2 and ZeRO-3
        uneven = {mode: train(mode, chunk_size=2, uneven=True) for mode in ("zero2", "zero3")}
        if get_rank() == 0:
            Path(sys.argv[1]).write_text(json.dumps(uneven))
        return
    results: dict = {name: train(mode, chunk) for name, mode, chunk in
                     [("ddp_gradcache", "torch", 2), ("zero2_gradcache", "zero2", 2),
                      ("zero3_gradcache", "zero3", 2), ("zero2_plain", "zero2", 0)]}
    if len(sys.argv) > 2:  # model, data config, schedule, output folder
        model, data, schedule, out = sys.argv[2:6]
        for stage in (0, 2, 3):
            results[f"trainer_zero{stage}"] = train_tiny_qwen(stage, model, data, schedule, Path(out))
        results["trainer_zero2_compiled"] = train_tiny_qwen(2, model, data, schedule, Path(out), compiled=True)
    if get_rank() == 0:
        Path(sys.argv[1]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
