"""Video items everywhere an image item goes: `vis-embed encode` (+ --dry-run, --workers),
eval's candidates and gallery layouts, training rows, the server (refused with a 400)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vis_embed import Embedder
from vis_embed.cli import main
from vis_embed.errors import DataError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _clip(folder: Path, count: int, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(count):
        Image.fromarray(rng.integers(0, 256, (56, 84, 3), dtype=np.uint8)).save(folder / f"frame_{index}.jpg")
    return folder


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.fixture()
def clips(tmp_path: Path) -> Path:
    for seed, name in enumerate(("a", "b", "c")):
        _clip(tmp_path / "clips" / name, 4 + 3 * seed, seed)
    (tmp_path / "clips" / "empty").mkdir()
    (tmp_path / "clips" / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 but nothing after")
    (tmp_path / "clips" / "notes.txt").write_text("not a video")
    return tmp_path


@pytest.fixture(scope="module")
def embedder(tiny_checkpoint: Callable[..., Path]) -> Embedder:
    return Embedder.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32")


ROWS = [{"id": "a", "video": "clips/a", "text": "first"},
        {"id": "b", "video": ["clips/b/frame_0.jpg", "clips/b/frame_6.jpg"]},
        {"id": "c", "text": "just text"},
        {"id": "d", "video": "clips/c"}]


@pytest.mark.parametrize("workers", ["0", "1"])
def test_encode_takes_video_rows_relative_to_the_input(clips: Path, tiny_checkpoint: Callable[..., Path],
                                                       embedder: Embedder, workers: str) -> None:
    items = _write(clips / "items.jsonl", ROWS)
    output = clips / "out" / "emb.npy"
    code = main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items), "--output", str(output),
                 "--instruction", "Represent it.", "--workers", workers, "--no-progress"])
    assert code == 0
    expected = embedder.encode([{key: value for key, value in row.items() if key != "id"} for row in ROWS],
                               "Represent it.", base_dir=clips)
    np.testing.assert_allclose(np.load(output), expected, atol=1e-6)


def test_encode_video_frames_flag_changes_the_vectors(clips: Path, tiny_checkpoint: Callable[..., Path]) -> None:
    items = _write(clips / "items.jsonl", [ROWS[3]])  # 10 frames: 8 of them, or 4
    outputs = []
    for frames in ("8", "4"):
        output = clips / f"emb{frames}.npy"
        assert main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items), "--output", str(output),
                     "--video-frames", frames, "--workers", "0", "--no-progress"]) == 0
        outputs.append(np.load(output)[0])
    assert float(outputs[0] @ outputs[1]) < 0.9999


def test_dry_run_counts_every_frame_of_a_clip(clips: Path, tiny_checkpoint: Callable[..., Path],
                                              embedder: Embedder, capsys: pytest.CaptureFixture[str]) -> None:
    items = _write(clips / "items.jsonl", [ROWS[0]])
    code = main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items), "--output",
                 str(clips / "dry.npy"), "--dry-run", "--workers", "0", "--no-progress"])
    assert code == 0
    report = capsys.readouterr().out
    length = embedder.model.prepare_one({"video": str(clips / "clips" / "a"), "text": "first"}).length
    assert str(length) in report and not (clips / "dry.npy").exists()


@pytest.mark.parametrize(("video", "message"), [
    ("clips/empty", "no frame files"),
    ("clips/broken.mp4", "cannot read video file"),
    ("clips/notes.txt", "cannot read video file"),
    ("clips/missing", "video not found"),
    (["clips/a/frame_0.jpg", "clips/a/nope.jpg"], "not found"),
])
def test_a_bad_video_exits_2_naming_the_item(clips: Path, tiny_checkpoint: Callable[..., Path],
                                             capsys: pytest.CaptureFixture[str], video: object, message: str) -> None:
    items = _write(clips / "items.jsonl", [ROWS[2], {"id": "bad", "video": video}])
    code = main(["encode", "--model", str(tiny_checkpoint()), "--input", str(items), "--output",
                 str(clips / "emb.npy"), "--workers", "0", "--no-progress"])
    error = capsys.readouterr().err
    assert code == 2 and f"{items}:2" in error and message in error and "'video'" in error, error
    assert not (clips / "emb.npy").exists()


def test_a_clip_of_too_many_pixels_is_refused(clips: Path, embedder: Embedder,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from test_video_items import _write_video

    from vis_embed.data import video_file

    _write_video(clips / "big.mp4", [Image.new("RGB", (96, 64), (i * 20, 0, 0)) for i in range(4)])
    monkeypatch.setattr(video_file, "DEFAULT_MAX_IMAGE_PIXELS", 96 * 64 - 1)  # the bomb limit, scaled down
    with pytest.raises(DataError, match="decompression-bomb") as error:
        embedder.encode([{"text": "fine"}, {"video": str(clips / "big.mp4")}])
    assert error.value.field == "video" and getattr(error.value, "item_index", 1) == 1


def test_eval_layouts_take_video_queries_candidates_and_gallery_rows(clips: Path, tiny_checkpoint: Callable[..., Path],
                                                                    embedder: Embedder) -> None:
    from vis_embed.data import load_benchmark

    (clips / "eval").mkdir()
    _write(clips / "eval" / "cands.jsonl", [
        {"id": "q1", "query": {"video": "a", "text": "what happens?"},
         "candidates": [{"text": "first"}, {"text": "second"}]},
        {"id": "q2", "query": {"text": "second clip"}, "candidates": [{"video": "b"}, {"video": ["c/frame_0.jpg"]}]},
    ])
    _write(clips / "eval" / "gallery.jsonl", [
        {"id": "g1", "video": "a", "identity": "x"}, {"id": "g2", "video": "b", "identity": "x"},
        {"id": "g3", "video": ["c/frame_1.jpg", "c/frame_2.jpg"], "identity": "y"},
        {"id": "g4", "video": "c", "identity": "y"},
    ])
    manifest = clips / "eval" / "bench.yaml"
    manifest.write_text(
        "name: videos\ndatasets:\n"
        "  - {name: VCands, benchmark: other, meta_task: V-QA, split: OOD, layout: candidates, path: cands.jsonl,"
        " image_root: ../clips}\n"
        "  - {name: VGallery, benchmark: other, meta_task: V-RET, split: OOD, layout: gallery, queries: gallery.jsonl,"
        " gallery: gallery.jsonl, image_root: ../clips}\n")
    benchmark = load_benchmark(manifest)
    candidates = benchmark.datasets[0].load_candidates()
    assert candidates[0].query["video"] == str(clips / "clips" / "a")
    assert candidates[1].candidates[1]["video"] == [str(clips / "clips" / "c" / "frame_0.jpg")]
    gallery = benchmark.datasets[1].load_gallery()
    assert gallery.gallery[2].item()["video"] == [str(clips / "clips" / "c" / f"frame_{i}.jpg") for i in (1, 2)]
    assert gallery.excluded()[0] == [0]  # the query's own clip (same id, same folder)

    out = clips / "results"
    assert main(["eval", "--model", str(tiny_checkpoint()), "--benchmark", str(manifest), "--out", str(out),
                 "--quiet", "--no-pictures", "--workers", "0"]) == 0
    datasets = json.loads((out / "results.json").read_text())["datasets"]
    metrics = {name: data["metrics"] for name, data in datasets.items()}
    # hit@1 recomputed from the Embedder's own vectors of the loaded items
    hits = []
    for row in candidates:
        scores = embedder.encode(row.candidates) @ embedder.encode([row.query])[0]
        hits.append(scores[0] > scores[1:].max())
    assert metrics["VCands"]["hit@1"] == pytest.approx(100 * np.mean(hits))
    vectors = embedder.encode([row.item() for row in gallery.gallery])
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)  # each row is its own query: left out
    identities = [row.identity for row in gallery.gallery]
    gallery_hits = [identities[int(np.argmax(scores))] == identities[i] for i, scores in enumerate(similarity)]
    assert metrics["VGallery"]["hit@1"] == pytest.approx(100 * np.mean(gallery_hits))


def test_training_rows_take_videos_resolved_against_the_image_root(clips: Path) -> None:
    from vis_embed.data import load_train_config

    data = clips / "train"
    data.mkdir()
    _write(data / "pairs.jsonl", [
        {"id": "p1", "query": {"text": "first clip"}, "positive": {"video": "a"}},
        {"id": "p2", "query": {"video": ["b/frame_0.jpg", "b/frame_1.jpg"]}, "positive": {"video": "b"}},
        {"id": "p3", "query": {"text": "third"}, "positive": {"video": "c"}},
    ])
    _write(data / "ids.jsonl", [{"id": "i1", "video": "a", "identity": "x"},
                                {"id": "i2", "video": "b", "identity": "x"}])
    (data / "train.yaml").write_text(
        "datasets:\n"
        "  - {name: vpairs, kind: pairs, path: pairs.jsonl, image_root: ../clips}\n"
        "  - {name: vids, kind: identity, path: ids.jsonl, image_root: ../clips}\n")
    config = load_train_config(data / "train.yaml")
    pairs, identities = config.datasets
    assert pairs.positive_item(pairs.get("p1"))["video"] == str(clips / "clips" / "a")
    assert pairs.query_item(pairs.get("p2"))["video"] == [str(clips / "clips" / "b" / f"frame_{i}.jpg")
                                                           for i in (0, 1)]
    assert len(set(pairs.labels.tolist())) == 3  # three different clips: three loss labels
    assert identities.query_item(identities.get("i2")) == {"video": str(clips / "clips" / "b"), "text": None}

    _write(data / "pairs.jsonl", [{"id": "p1", "query": {"text": "x"}, "positive": {"video": "missing"}}])
    with pytest.raises(DataError, match="video not found") as error:
        load_train_config(data / "train.yaml")
    assert error.value.line == 1 and error.value.field == "positive.video"


def _data_uri(path: Path) -> str:
    import base64

    return "data:image/jpeg;base64," + base64.b64encode(path.read_bytes()).decode()


def test_the_server_embeds_a_clip_of_data_uri_frames_like_encode(clips: Path, embedder: Embedder) -> None:
    import httpx
    from _serve_fixtures import RunningServer

    from vis_embed.serving.app import create_app
    from vis_embed.serving.settings import ServerSettings

    frames = sorted((clips / "clips" / "c").iterdir(), key=lambda path: int(path.stem.split("_")[1]))  # 10
    picked = set(np.linspace(0, len(frames) - 1, 8, dtype=int).tolist())
    # frames the model will not see are never read: a broken one there changes nothing
    sources = [_data_uri(frame) if index in picked else "data:image/png;base64,broken"
               for index, frame in enumerate(frames)]
    settings = ServerSettings(model_name="m", max_batch_size=8, max_wait_ms=10, max_request_bytes=2_000_000,
                              max_request_pixels=8 * 84 * 56 + 84 * 56)
    running = RunningServer(create_app(embedder, settings))
    try:
        def post(items: list) -> httpx.Response:
            return httpx.post(f"{running.url}/v1/embeddings", json={"model": "m", "input": items,
                                                                    "instruction": "Represent it."}, timeout=60)

        response = post([{"video": sources, "text": "the clip"}, "a text"])
        assert response.status_code == 200, response.text
        served = np.array([row["embedding"] for row in response.json()["data"]])
        expected = embedder.encode([{"video": str(clips / "clips" / "c"), "text": "the clip"}, {"text": "a text"}],
                                   "Represent it.")
        np.testing.assert_allclose(served, expected, atol=1e-5)
        # the typed content-part spelling of the same clip is the same item
        typed = post([{"type": "video", "frames": sources, "text": "the clip"}, "a text"])
        assert typed.status_code == 200, typed.text
        np.testing.assert_allclose([row["embedding"] for row in typed.json()["data"]], served, atol=1e-6)
        for part in ({"type": "video"}, {"type": "video", "video": sources}):
            refused = post([part])
            assert refused.status_code == 400 and refused.json()["error"]["param"].startswith("input[0]"), part
        # every picked frame counts in the request's pixels: 8 frames + 1 image fit, 8 frames + 2 do not
        image = _data_uri(frames[0])
        assert post([{"video": sources}, {"image": image}]).status_code == 200
        too_many = post([{"video": sources}, {"image": image}, {"image": image}])
        assert too_many.status_code == 413 and too_many.json()["error"]["param"] == "input[2].image"
        bad_frame = list(sources)
        bad_frame[0] = "data:image/png;base64,AAAA"
        answer = post([{"video": bad_frame}])
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "input[0].video[0]"
        for video in (str(clips / "clips" / "c"), ["/etc/hostname"]):  # no folder; no local frame by default
            answer = post([{"video": video}])
            assert answer.status_code == 400 and answer.json()["error"]["param"].startswith("input[0].video"), \
                answer.text
    finally:
        running.stop()


def _gradcache_step(checkpoint: Path, queries: list, candidates: list, chunk_size: int):
    import torch

    from vis_embed.model.network.embedding_model import EmbeddingModel
    from vis_embed.training.backends import TorchBackend
    from vis_embed.training.gradcache import contrastive_step
    from vis_embed.training.recipe import GradCacheConfig, OptimizerConfig
    from vis_embed.training.losses import Temperature, info_nce_loss
    from vis_embed.training.lr_schedule import lr_lambda

    torch.manual_seed(0)
    model = EmbeddingModel.from_pretrained(checkpoint, device="cpu", dtype=torch.float32)
    model.add_lora(r=4, alpha=8, dropout=0.0, vision=True)  # the vision tower trains on the clips too
    model.train()
    tau = Temperature(0.05)
    backend = TorchBackend(model, optimizer=OptimizerConfig(lr=1e-3, max_grad_norm=0.0), lr_schedule=lr_lambda(0, 10))
    prepared_q = model.prepare(queries, instruction="Find the clip.")
    prepared_c = model.prepare(candidates, instruction="Represent the clip.")
    result = contrastive_step(backend, model.collate, prepared_q, prepared_c,
                              lambda q, c: info_nce_loss(q, c, tau()),
                              gradcache=GradCacheConfig(chunk_size=chunk_size, max_padding=1.0),
                              query_lengths=[p.length for p in prepared_q],
                              candidate_lengths=[p.length for p in prepared_c])
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None and p.grad.norm() > 0}
    return result.loss, grads, [p.length for p in prepared_q]


def test_gradcache_over_video_items_equals_the_plain_step(clips: Path, tiny_checkpoint: Callable[..., Path]) -> None:
    root = clips / "clips"
    queries = [{"video": str(root / "a")}, {"video": str(root / "b"), "text": "second"},
               {"video": [str(root / "c" / "frame_0.jpg")] * 3}, {"text": "a text query"}]
    candidates = [{"text": "first"}, {"image": str(root / "b" / "frame_2.jpg")}, {"video": str(root / "c")},
                  {"text": "fourth"}]
    loss, grads, _ = _gradcache_step(tiny_checkpoint(), queries, candidates, chunk_size=0)
    chunked_loss, chunked, _ = _gradcache_step(tiny_checkpoint(), queries, candidates, chunk_size=2)
    assert chunked_loss == pytest.approx(loss, rel=1e-5)
    assert set(chunked) == set(grads) and any(".visual." in name for name in grads)
    for name, reference in grads.items():
        assert float((chunked[name] - reference).norm() / reference.norm()) <= 1e-4, name


def test_gallery_and_peer_protocol_rows_check_their_videos(clips: Path) -> None:
    from vis_embed.data.benchmark import load_gallery
    from vis_embed.evaluation.layout_base import normalise_item

    both = {"id": "g2", "video": "clips/b", "image": "clips/b/frame_0.jpg", "identity": "x"}
    rows = _write(clips / "g.jsonl", [{"id": "g1", "video": "clips/a", "identity": "x"}, both])
    with pytest.raises(DataError, match="not both") as error:
        load_gallery(rows, rows, clips)
    assert (error.value.line, error.value.field) == (2, "video")
    item = normalise_item({"video": ["a/frame_0.jpg"]}, clips / "clips", rows, 1, "left")
    assert item["video"] == [str(clips / "clips" / "a" / "frame_0.jpg")]
    with pytest.raises(DataError, match="video not found"):
        normalise_item({"video": "nowhere"}, clips / "clips", rows, 1, "left")
