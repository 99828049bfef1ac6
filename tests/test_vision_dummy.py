"""A batch without images on one of several ranks still runs the vision tower, for nothing.

Under DeepSpeed every rank must make the same collectives: ZeRO-2/3 reduce the trainable
weights' gradients in buckets and ZeRO-3 gathers each module's weights in its forward, so a
rank whose GradCache chunk held no image (text-only candidates, a text-only dataset) once left
the tower out while the others ran it: gloo aborted, NCCL would hang
(tests/test_distributed_training.py runs that on two ranks).  Such a batch now runs the tower
on one dummy merge group and hands its output, cut to nothing, to the model as real features
are handed over (model/network/vision_metadata.py: vision_tower_dummy): every trainable weight
of the tower gets a gradient of exactly 0, and no vector and no other gradient changes.  Here
on one process with the world size faked to 2, for each architecture (each tower's own patch
size, temporal patch and merge size; Qwen3-VL's deepstack mergers).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ITEMS = [{"text": "a red square"}, {"text": "two blue circles on a grey background"}]


@pytest.mark.parametrize("adaptation", ["lora", "full"])
@pytest.mark.parametrize("arch", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"])
def test_a_text_only_batch_on_several_ranks_gives_the_vision_tower_zero_gradients(
        tiny_checkpoint, monkeypatch: pytest.MonkeyPatch, arch: str, adaptation: str) -> None:
    import vis_embed.distributed
    from vis_embed.model.network.adaptation import FullAdaptation
    from vis_embed.model.network.embedding_model import EmbeddingModel

    torch.manual_seed(0)
    model = EmbeddingModel.from_pretrained(tiny_checkpoint(arch), device="cpu", dtype=torch.float32)
    if adaptation == "full":
        FullAdaptation().apply(model)
    else:
        model.add_lora(r=4, alpha=8, dropout=0.0, vision=True)
    model.train()
    visual = model.base_model().visual
    calls: list[int] = []
    visual.register_forward_hook(lambda module, args, output: calls.append(1))
    batch = model.collate(model.prepare(ITEMS))
    weights = torch.randn(len(ITEMS), model.embedding_dim, generator=torch.Generator().manual_seed(1))

    def trained() -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        model.zero_grad(set_to_none=True)
        vectors = model(**batch)
        (vectors * weights).sum().backward()
        return vectors.detach(), {name: p.grad for name, p in model.named_parameters() if p.requires_grad}

    alone, alone_grads = trained()  # one process: nothing to keep in step, no tower
    assert not calls
    tower = {name for name in alone_grads if ".visual." in name}
    assert tower and all(alone_grads[name] is None for name in tower)

    monkeypatch.setattr(vis_embed.distributed, "get_world_size", lambda: 2)
    vectors, grads = trained()
    assert len(calls) == 1  # the tower ran, once
    assert torch.equal(vectors, alone)
    for name, grad in grads.items():
        if name in tower:  # every trainable weight of the tower (deepstack mergers too): exactly 0
            assert grad is not None and not grad.any(), name
        elif grad is None:  # full fine-tuning's LM head: not in the graph either way
            assert alone_grads[name] is None, name
        else:
            assert torch.equal(grad, alone_grads[name]), name

    with torch.no_grad():  # nothing to reduce, weights not partitioned: no tower (Embedder.encode, pass 1)
        assert torch.equal(model(**batch), alone)
    assert len(calls) == 1
