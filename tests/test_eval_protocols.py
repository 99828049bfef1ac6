"""Evaluation protocols: vlm2vec (MMEB-V2's default) and qwen3-vl-embedding, chosen by the
manifest's ``protocol`` or ``--protocol``, applied in one place and recorded in results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from eval_fakes import FakeEncoder, make_identity_benchmark

from vis_embed.cli import main
from vis_embed.data import load_benchmark
from vis_embed.evaluation.harness import Harness
from vis_embed.evaluation.protocol_runs import protocol_embedding_values
from vis_embed.evaluation.settings import EvalSettings
from vis_embed.model.embedding_config import EmbeddingConfig
from vis_embed.model.prompts import build_prompt


def _manifest(tmp_path: Path, **top) -> Path:
    files = make_identity_benchmark(tmp_path / "bench", n_views=2)
    path = files["candidates"].parent / "benchmark.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny", **top, "datasets": [
        {"name": "Cand", "benchmark": "MVEB", "meta_task": "ID-Rec", "split": "IND", "layout": "candidates",
         "path": "cand.jsonl", "image_root": "images", "query_instruction": "Find the same object.",
         "candidate_instruction": "Represent the image."}]}))
    return path


def test_chat_system_puts_the_instruction_in_the_system_turn(tiny_checkpoint) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_checkpoint("qwen2-vl"))
    prompt = build_prompt(processor, True, "Find the same object.", "a red cup", "chat-system")
    system, user = prompt.split("<|im_start|>user")
    assert "<|im_start|>system\nFind the same object.<|im_end|>" in system
    assert "Find the same object." not in user and "a red cup" in user and "<|image_pad|>" in user
    assert "Represent the user's input." in build_prompt(processor, False, None, "a red cup", "chat-system")
    chat = build_prompt(processor, False, "Find the same object.", "a red cup", "chat")
    assert "Find the same object. a red cup" in chat.split("<|im_start|>user")[1]  # the default format: unchanged


@pytest.mark.parametrize(("protocol", "candidate_instruction"),
                         [(None, "Represent the image."), ("vlm2vec", "Represent the image."),
                          ("qwen3-vl-embedding", None)])
def test_protocol_decides_the_candidate_instruction_and_is_recorded(tmp_path: Path, protocol: str | None,
                                                                      candidate_instruction: str | None) -> None:
    specs = load_benchmark(_manifest(tmp_path)).datasets
    encoder = FakeEncoder()
    results = Harness(encoder, tmp_path / "out", EvalSettings(show_progress=False, pictures=False,
                                                              protocol=protocol)).run(specs)
    assert {instruction for instruction, _n in encoder.calls} == {"Find the same object.", candidate_instruction}
    if protocol is None:
        assert "protocol" not in results
    else:
        assert results["protocol"]["name"] == protocol
        assert results["protocol"]["candidate_instruction"] is (candidate_instruction is not None)


def test_protocol_values_fill_what_no_flag_gave() -> None:
    fields = EmbeddingConfig.model_fields
    values = protocol_embedding_values("qwen3-vl-embedding", {"prompt_format": None, "max_pixels": 1000}, fields)
    assert values["prompt_format"] == "chat-system" and values["max_pixels"] == 1000
    assert protocol_embedding_values("qwen3-vl-embedding", {"prompt_format": "vlm2vec"}, fields)["prompt_format"] \
        == "vlm2vec"  # a flag given on the command line wins
    # the frames per clip apply where the EmbeddingConfig declares them (the video field), else not at all
    assert protocol_embedding_values("vlm2vec", {}, ["video_frames"]) == {"video_frames": 8}
    assert protocol_embedding_values("vlm2vec", {}, ["prompt_format"]) == {}
    assert protocol_embedding_values(None, {"x": 1}, fields) == {"x": 1}


def test_eval_command_takes_the_protocol_from_the_manifest_or_the_flag(tiny_checkpoint, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, protocol="qwen3-vl-embedding")
    common = ["--model", str(tiny_checkpoint("qwen2-vl")), "--benchmark", str(manifest), "--device", "cpu",
              "--quiet", "--no-pictures"]
    assert main(["eval", *common, "--out", str(tmp_path / "a")]) == 0
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert results["protocol"]["name"] == "qwen3-vl-embedding"
    assert results["model"]["embedding_config"]["prompt_format"] == "chat-system"
    assert results["protocol"]["applied"]["prompt_format"] == "chat-system"
    assert main(["eval", *common, "--out", str(tmp_path / "b"), "--protocol", "vlm2vec"]) == 0
    results = json.loads((tmp_path / "b" / "results.json").read_text())
    assert results["protocol"]["name"] == "vlm2vec" and results["model"]["embedding_config"]["prompt_format"] == "chat"
    with pytest.raises(SystemExit) as refused:  # argparse's choices: exit 2 before anything loads
        main(["eval", *common, "--out", str(tmp_path / "c"), "--protocol", "gme"])
    assert refused.value.code == 2
