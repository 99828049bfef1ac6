"""Video items: the frame rule (VLM2Vec's), the item contract, and one clip through the model.

A clip is a folder of frames, a list of frame files or a video file (PyAV); the model sees
``video_frames`` frames picked by ``np.linspace(0, n - 1, k, dtype=int)`` (all frames when fewer,
VLM2Vec's ``process_video_frames``), padded with the last to frame pairs, as ONE video of the
Qwen-VL processor.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vis_embed import Embedder
from vis_embed.data.items import ResolvedItem, check_item
from vis_embed.data.video import frame_files, frame_indices, load_video
from vis_embed.errors import ConfigError, DataError
from vis_embed.model.embedding_config import EmbeddingConfig, add_embedding_config_arguments

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _frame(seed: int, size: tuple[int, int] = (84, 56)) -> Image.Image:
    width, height = size
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def _folder(root: Path, count: int, name: str = "clip", sizes: list[tuple[int, int]] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        _frame(index, sizes[index] if sizes else (84, 56)).save(folder / f"frame_{index}.png")
    return folder


# ------------------------------------------------------------------ the frame rule (no model)
@pytest.mark.parametrize(("count", "frames"), [(12, 8), (8, 8), (100, 8), (64, 64), (10, 5), (200, 64)])
def test_frames_are_picked_by_vlm2vecs_linspace(count: int, frames: int) -> None:
    picked = np.linspace(0, count - 1, frames, dtype=int).tolist()
    expected = picked + [picked[-1]] * (len(picked) % 2)  # an odd count: the last frame pairs itself
    assert frame_indices(count, frames) == expected


def test_a_short_clip_keeps_every_frame_once_and_repeats_its_last() -> None:
    # VLM2Vec passes the 3 frames as they are (no linspace repeats such as [0,0,0,0,1,1,1,2]);
    # the Qwen-VL processor merges frame pairs and repeats the last frame of an odd count.
    assert frame_indices(3, 8) == [0, 1, 2, 2]
    assert frame_indices(1, 8) == [0, 0]
    assert frame_indices(4, 8) == [0, 1, 2, 3]


def test_a_folders_frames_are_sorted_naturally(tmp_path: Path) -> None:
    folder = tmp_path / "clip"
    folder.mkdir()
    for name in ("frame_10.png", "frame_2.jpg", "frame_1.png", ".hidden.png", "notes.txt"):
        (folder / name).write_bytes(b"x")
    (folder / "sub.png").mkdir()  # a folder named like a frame is no frame
    assert [Path(path).name for path in frame_files(folder)] == ["frame_1.png", "frame_2.jpg", "frame_10.png"]


def test_a_folders_frame_order_never_depends_on_its_listing_and_any_name_sorts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # '²' is a digit to str.isdigit but not a number to int(): such a name once crashed the sort
    # with a ValueError traceback; names equal but for case or leading zeros took the order the
    # file system listed them in (another machine's listing: another clip).
    import os

    names = ["frame_01.png", "frame_1.png", "Frame_2.png", "frame_2.png", "x²1.png", "²3.png"]
    folder = tmp_path / "clip"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"x")
    real_scandir = os.scandir

    def listed(reverse: bool) -> list[str]:
        def scandir(path: object) -> _Listing:
            with real_scandir(path) as entries:
                return _Listing(sorted(entries, key=lambda entry: entry.name, reverse=reverse))

        monkeypatch.setattr(os, "scandir", scandir)
        try:
            return [Path(path).name for path in frame_files(folder)]
        finally:
            monkeypatch.setattr(os, "scandir", real_scandir)

    expected = ["frame_01.png", "frame_1.png", "Frame_2.png", "frame_2.png", "x²1.png", "²3.png"]
    assert listed(reverse=False) == listed(reverse=True) == expected


class _Listing(list):
    """A fixed listing standing in for ``os.scandir``'s iterator (a context manager)."""

    def __enter__(self) -> "_Listing":
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_load_video_decodes_the_picked_frames_in_order(tmp_path: Path) -> None:
    folder = _folder(tmp_path, 12)
    clip = load_video(str(folder), num_frames=8)
    picked = np.linspace(0, 11, 8, dtype=int).tolist()
    assert clip.indices == picked
    for frame, index in zip(clip.frames, picked):
        assert np.array_equal(np.asarray(frame), np.asarray(_frame(index)))


# ------------------------------------------------------------------ the item contract
def test_the_item_contract_takes_the_three_video_forms(tmp_path: Path) -> None:
    assert check_item({"video": "clips/a"}) == {"video": "clips/a"}
    assert check_item({"video": tmp_path, "text": "x"})["video"] == tmp_path
    assert check_item({"video": ("a.png", "b.png")})["video"] == ["a.png", "b.png"]


@pytest.mark.parametrize(("item", "field", "message"), [
    ({"video": []}, "video", "empty"),
    ({"video": ["a.png", 3]}, "video", "frame [1]"),
    ({"video": "  "}, "video", "must not be empty"),
    ({"video": 5}, "video", "must be a path"),
    ({"video": "clip", "image": "a.png"}, "video", "not both"),
    ({"video": "clip", "bbox": [0, 0, 4, 4]}, "bbox", "no image"),
    ({"vid": "clip"}, "vid", "image, text, bbox, video"),
])
def test_a_bad_video_value_is_a_data_error_naming_the_field(item: dict, field: str, message: str) -> None:
    with pytest.raises(DataError) as error:
        check_item(item, "query")
    assert error.value.field == f"query.{field}" and message in str(error.value)


def test_relative_videos_resolve_like_images_and_sign_their_frames(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "root", 3)
    item = ResolvedItem.of({"video": "clip"}, tmp_path / "root")
    assert item.video == str(folder)
    frames = ResolvedItem.of({"video": ["clip/frame_0.png", "clip/frame_1.png"]}, tmp_path / "root")
    assert frames.video == (str(folder / "frame_0.png"), str(folder / "frame_1.png"))
    assert frames.as_dict()["video"] == list(frames.video)
    assert ResolvedItem.of({"image": "a.png"}).signature() == '["a.png", null, null]'  # image keys unchanged

    def digest(path: str) -> str:
        return str(hash(Path(path).read_bytes()))

    before = item.signature(digest)
    _frame(99).save(folder / "frame_1.png")  # a frame changed in place: a new signature (no stale cache)
    assert item.signature(digest) != before


# ------------------------------------------------------------------ settings
def test_video_settings_travel_in_the_embedding_config_and_its_flags() -> None:
    config = EmbeddingConfig()
    assert (config.video_frames, config.video_max_pixels) == (8, 768 * 28 * 28)
    assert config.with_values(video_frames=64).fingerprint() != config.fingerprint()
    assert config.with_values(video_max_pixels=100_000).fingerprint() != config.fingerprint()
    parser = argparse.ArgumentParser()
    add_embedding_config_arguments(parser)
    args = parser.parse_args(["--video-frames", "64", "--video-max-pixels", "200704"])
    assert (args.video_frames, args.video_max_pixels) == (64, 200704)
    with pytest.raises(ConfigError, match="video_max_pixels"):
        config.with_values(min_pixels=4096, video_max_pixels=1024)
    with pytest.raises(ConfigError, match="video_frames"):
        config.with_values(video_frames=0)


def test_a_video_file_without_pyav_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00" * 64)
    monkeypatch.setitem(sys.modules, "av", None)  # import av -> ImportError
    with pytest.raises(ConfigError, match=r"pip install 'vis_embed\[video\]'"):
        load_video(str(clip))


# ------------------------------------------------------------------ through the model
@pytest.fixture(scope="module")
def qwen2(tiny_checkpoint: Callable[..., Path]) -> Embedder:
    return Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", dtype="float32")


def test_a_folder_and_the_list_of_its_picked_frames_give_the_same_vector(qwen2: Embedder, tmp_path: Path) -> None:
    folder = _folder(tmp_path, 12)
    picked = [str(folder / f"frame_{index}.png") for index in np.linspace(0, 11, 8, dtype=int)]
    others = [str(folder / f"frame_{index}.png") for index in range(8)]  # not the rule's frames
    vectors = qwen2.encode([{"video": str(folder)}, {"video": picked}, {"video": others}])
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
    assert float(vectors[0] @ vectors[2]) < 0.9999


def test_a_three_frame_clip_is_its_frames_with_the_last_repeated(qwen2: Embedder, tmp_path: Path) -> None:
    folder = _folder(tmp_path, 3)
    frames = [str(folder / f"frame_{index}.png") for index in (0, 1, 2, 2)]
    prepared = qwen2.model.prepare_one({"video": str(folder)})
    assert prepared.video_grid_thw[0, 0].item() == 2  # 4 frames = 2 frame pairs
    vectors = qwen2.encode([{"video": str(folder)}, {"video": frames}, {"video": frames[:3]}])
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
    np.testing.assert_allclose(vectors[0], vectors[2], atol=1e-6)  # the processor's own padding agrees


def test_frames_of_mixed_sizes_all_take_the_first_frames_grid(qwen2: Embedder, tmp_path: Path) -> None:
    sizes = [(84, 56), (140, 140), (56, 112), (84, 56)]
    folder = _folder(tmp_path, 4, sizes=sizes)
    preparer = qwen2.model.preparer()
    target = preparer.video_target_size(*sizes[0])
    resized = tmp_path / "resized"
    resized.mkdir()
    for index in range(4):  # the documented rule done by hand: every frame to the first's target size
        frame = Image.open(folder / f"frame_{index}.png").convert("RGB")
        (frame if frame.size == target else frame.resize(target, Image.Resampling.BICUBIC)).save(
            resized / f"frame_{index}.png")
    prepared = qwen2.model.prepare_one({"video": str(folder)})
    factor = 14 * 2
    assert prepared.video_grid_thw[0].tolist() == [2, target[1] // 14, target[0] // 14]
    assert target[0] % factor == 0 and target[1] % factor == 0
    vectors = qwen2.encode([{"video": str(folder)}, {"video": str(resized)}])
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)


def _write_video(path: Path, frames: list[Image.Image], fps: int = 10) -> None:
    import av

    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = frames[0].size
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_image(frame)):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def test_a_video_file_gives_the_vector_of_its_frames_extracted_losslessly(qwen2: Embedder, tmp_path: Path) -> None:
    import av

    clip = tmp_path / "clip.mp4"
    _write_video(clip, [_frame(index, (96, 64)) for index in range(11)])
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    with av.open(str(clip)) as container:  # every decoded frame, as PNG (lossless)
        for index, frame in enumerate(container.decode(video=0)):
            frame.to_image().save(extracted / f"f{index}.png")
    assert len(list(extracted.iterdir())) == 11
    vectors = qwen2.encode([{"video": str(clip)}, {"video": str(extracted)}])
    # Qwen2-VL reads no frame rate, so the file and its frames are the same input exactly
    # (Qwen2.5-VL / Qwen3-VL also see the file's own rate: 10 fps against 2 for frames).
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)


def test_the_length_estimate_counts_every_frame_pair(qwen2: Embedder, tmp_path: Path) -> None:
    from vis_embed.model.inputs.lengths import estimated_lengths

    folder = _folder(tmp_path, 12)
    items = [{"video": str(folder), "text": "a clip"}, {"video": [str(folder / "frame_0.png")] * 3, "text": "a clip"}]
    prepared = [qwen2.model.prepare_one(item, "Represent the video.") for item in items]
    assert estimated_lengths(qwen2.model, items, "Represent the video.") == [p.length for p in prepared]
    per_frame_pair = int(prepared[0].video_grid_thw[0, 1:].prod()) // 4
    assert prepared[0].length - prepared[1].length == 2 * per_frame_pair  # 4 pairs against 2


@pytest.fixture(scope="module", params=ARCHS)
def embedder_of_arch(request: pytest.FixtureRequest, tiny_checkpoint: Callable[..., Path]) -> Embedder:
    return Embedder.from_pretrained(tiny_checkpoint(request.param), device="cpu", dtype="float32")


def _mixed_items(root: Path) -> list[dict]:
    folder = _folder(root, 5)
    return [{"video": str(folder)}, {"image": str(folder / "frame_1.png")}, {"text": "a red car"},
            {"video": [str(folder / "frame_0.png"), str(folder / "frame_3.png")], "text": "the clip"}]


def test_the_length_estimate_is_exact_for_clips_of_frames(embedder_of_arch: Embedder, tmp_path: Path) -> None:
    from vis_embed.model.inputs.lengths import estimated_lengths

    folder = _folder(tmp_path, 12)
    items = [{"video": str(folder), "text": "a clip"}, {"video": [str(folder / "frame_3.png")] * 3},
             {"video": str(folder)}]
    model = embedder_of_arch.model
    prepared = [model.prepare_one(item, "Represent the video.") for item in items]
    assert estimated_lengths(model, items, "Represent the video.") == [p.length for p in prepared]


def test_a_batch_mixing_images_videos_and_texts_gives_each_items_own_vector(embedder_of_arch: Embedder,
                                                                           tmp_path: Path) -> None:
    items = _mixed_items(tmp_path)
    together = embedder_of_arch.encode(items, "Represent it.", batch_size=len(items))
    alone = np.stack([embedder_of_arch.encode([item], "Represent it.")[0] for item in items])
    np.testing.assert_allclose(together, alone, atol=2e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_video_tokens_take_one_attention_call_per_vision_block(arch: str, tiny_checkpoint: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    from vis_embed.model.network.attention import VARLEN, count_attention_calls

    # ours, asked for by name: on a CPU the default is transformers' sdpa (by measurement)
    model = Embedder.from_pretrained(tiny_checkpoint(arch), device="cpu", dtype="float32",
                                     attn_implementation=VARLEN).model
    items = _mixed_items(tmp_path)
    base = model.base_model()
    blocks, layers = len(base.visual.blocks), len(base.language_model.layers)
    assert model.current_config().attn_implementation == VARLEN
    videos = model.collate(model.prepare([item for item in items if "video" in item] + [items[2]]))
    mixed = model.collate(model.prepare(items))
    with torch.no_grad():
        # two clips of several frame pairs each, and a text: one call per block and layer
        assert 0 < count_attention_calls(lambda: model(**videos)) <= blocks + layers
        # images and clips together: the vision tower runs once for both (model/network/vision_metadata.py),
        # where transformers' own forward runs it once per kind
        assert 0 < count_attention_calls(lambda: model(**mixed)) <= blocks + layers


def test_the_pooled_vector_is_the_final_post_norm_hidden_state(embedder_of_arch: Embedder, tmp_path: Path) -> None:
    model = embedder_of_arch.model
    batch = model.collate(model.prepare(_mixed_items(tmp_path), "Represent it."), padding_side="right")
    base = model.base_model()
    captured = {}
    hook = base.language_model.layers[-1].register_forward_hook(
        lambda module, args, output: captured.setdefault("pre_norm", output[0] if isinstance(output, tuple)
                                                         else output))
    norm = base.language_model.norm
    initial = norm.weight.detach().clone()
    try:
        with torch.no_grad():
            # A fresh RMSNorm's weight is all ones: after L2 normalisation it would not change a
            # direction, and pre- and post-norm pooling could not be told apart.  A trained one can.
            norm.weight.copy_(torch.rand(initial.shape, generator=torch.Generator().manual_seed(0)) + 0.5)
            pooled = model(**batch)
            outputs = base(**batch, output_hidden_states=True, return_dict=True)
            normed = norm(captured["pre_norm"])
    finally:
        hook.remove()
        with torch.no_grad():
            norm.weight.copy_(initial)
    last = batch["attention_mask"].sum(-1) - 1
    rows = torch.arange(len(last))
    final = outputs.hidden_states[-1]
    torch.testing.assert_close(final, normed)  # transformers' last hidden state is the post-norm one
    torch.testing.assert_close(pooled, torch.nn.functional.normalize(final[rows, last].float(), dim=-1))
    pre_norm = torch.nn.functional.normalize(captured["pre_norm"][rows, last].float(), dim=-1)
    assert (pooled - pre_norm).abs().max() > 1e-3  # what pooling a pre-norm state would give instead


@pytest.mark.parametrize("count", [8, 32])
def test_a_clip_of_frames_is_two_frames_a_second_whichever_were_picked(count: int, tiny_checkpoint: Callable[..., Path],
                                                                      tmp_path: Path) -> None:
    # qwen-vl-utils presents a frame list as consecutive frames at 2 fps (frames_indices =
    # range(n)): Qwen2.5-VL spaces frame pairs 1 s apart for 8 frames picked of 32 as of 8 (the
    # picked positions once told it 4 s: transformers reads them as a sampling of a 2 fps video)
    from vis_embed.model.embedding_config import EmbeddingConfig
    from vis_embed.model.files.tiny import build_processor
    from vis_embed.model.inputs.preparer import Preparer

    preparer = Preparer(build_processor("qwen2.5-vl"), EmbeddingConfig(video_frames=8))
    prepared = preparer.prepare_one({"video": str(_folder(tmp_path, count))})
    assert prepared.second_per_grid_ts.tolist() == [1.0]  # seconds per frame pair, one value per video


def test_both_prompt_formats_give_a_clip_one_video_placeholder(tiny_checkpoint: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    from vis_embed.model.prompts import build_prompt
    from vis_embed.model.files.tiny import build_processor

    processor = build_processor("qwen2-vl")
    assert build_prompt(processor, "video", "Find it.", "a clip", "vlm2vec") == "<|video_pad|> Find it. a clip"
    chat = build_prompt(processor, "video", "Find it.", None, "chat")
    assert chat.count("<|video_pad|>") == 1 and "<|image_pad|>" not in chat
    folder = _folder(tmp_path, 4)
    embedder = Embedder.from_pretrained(tiny_checkpoint("qwen2-vl"), device="cpu", prompt_format="vlm2vec")
    prepared = embedder.model.prepare_one({"video": str(folder)}, "Find it.")
    video_pad = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    pads = int((prepared.input_ids == video_pad).sum())
    assert pads == int(prepared.video_grid_thw.prod()) // 4 and prepared.input_ids[0] == video_pad
    assert prepared.pixel_values is None and int((prepared.mm_token_type_ids == 2).sum()) == pads
