"""`vis-embed synth --modalities image,video,document`: the clip and page tasks (docs/synth.md).

One ``tiny`` rendering with every modality (~2 s) is shared.  The video items and the
``qrels`` layout are checked here at the file level (plain Python): the manifest entries
that today's schema knows (the two video entries) are validated with it too.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image

from vis_embed.prep.synth import generate
from vis_embed.prep.synth.documents import page_png
from vis_embed.prep.synth.render import compose
from vis_embed.prep.synth.sampling import single_spec
from vis_embed.prep.synth.video import MOTIONS, VIDEO_SIZES, class_name
from vis_embed.cli import main as cli_main
from vis_embed.data.manifest import ManifestEntry
from vis_embed.errors import ConfigError

ALL = "image,video,document"


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("synthv") / "out", seed=0, size="tiny", workers=1, modalities=ALL)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tree_digest(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def entries(out: Path) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in yaml.safe_load((out / "benchmark.yaml").read_text())["datasets"]}


def frames_by_clip(out: Path) -> dict[str, list[dict[str, Any]]]:
    clips: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in read_jsonl(out / "eval/meta/video.jsonl"):
        clips[row["clip"]].append(row)
    return clips


# --------------------------------------------------------------------------------------------
# Video


def test_clips_are_folders_of_naturally_sorted_frames(out: Path) -> None:
    size = VIDEO_SIZES["tiny"]
    clips = frames_by_clip(out)
    assert len(clips) == size.identities * size.clips_per_identity
    for clip, rows in clips.items():
        names = sorted(path.name for path in (out / "eval/images" / clip).iterdir())
        assert names == [f"frame_{k:03d}.png" for k in range(size.frames)]
        assert [row["frame"] for row in rows] == list(range(size.frames))
        assert Image.open(out / "eval/images" / clip / names[0]).size == (64, 64)


def _object_centroid(out: Path, row: dict[str, Any]) -> np.ndarray:
    """Centroid of the pixels that differ from the frame's own background (rendered without the object)."""
    frame = np.asarray(Image.open(out / "eval/images" / row["image"]), dtype=np.int16)
    empty = {**single_spec("object", row["identity_params"], row["context"]), "objects": []}
    background = np.asarray(compose(empty, 64)[0], dtype=np.int16)
    ys, xs = np.nonzero(np.abs(frame - background).max(axis=-1) > 24)
    assert len(xs) > 30, row["image"]
    return np.array([xs.mean(), ys.mean()])


def test_frames_show_the_object_moving_along_its_direction(out: Path) -> None:
    for clip, rows in frames_by_clip(out).items():
        direction = np.array(MOTIONS[rows[0]["motion"]["direction"]])
        progress = [float(_object_centroid(out, row) @ direction) for row in rows]
        steps = np.diff(progress)
        assert (steps > 0.5).all(), (clip, progress)        # monotone, every frame
        assert progress[-1] - progress[0] > 0.2 * 64, clip  # and far: a quarter of the frame or so


def test_frames_re_render_from_their_metadata_rows(out: Path) -> None:
    for rows in list(frames_by_clip(out).values())[:3]:
        for row in rows:
            image, _ = compose(single_spec(row["family"], row["identity_params"], row["context"]), 64)
            assert np.array_equal(np.asarray(image), np.asarray(Image.open(out / "eval/images" / row["image"])))


def test_clips_of_an_identity_share_its_object_and_differ_in_context(out: Path) -> None:
    by_identity: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for rows in frames_by_clip(out).values():
        assert len({row["identity"] for row in rows}) == 1
        assert len({json.dumps(row["context"]["background"]) for row in rows}) == 1  # fixed within a clip
        by_identity[rows[0]["identity"]].append(rows)
    assert all(len(clips) == VIDEO_SIZES["tiny"].clips_per_identity for clips in by_identity.values())
    params = {name: clips[0][0]["identity_params"] for name, clips in by_identity.items()}
    for name, clips in by_identity.items():
        assert all(row["identity_params"] == params[name] for clip in clips for row in clip)
        for key in ("background", "lighting"):
            assert len({json.dumps(clip[0]["context"][key]) for clip in clips}) == len(clips), (name, key)
        assert len({clip[0]["motion"]["direction"] for clip in clips}) == len(clips)
    # Distinct identities look distinct (at least two main attributes apart).
    names = sorted(params)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert sum(params[a][k] != params[b][k] for k in ("shape", "pattern", "primary", "secondary")) >= 2


def test_video_retrieval_and_classification_rows(out: Path) -> None:
    frames = {clip: rows[0] for clip, rows in frames_by_clip(out).items()}
    gallery = read_jsonl(out / "eval/video_ret_gallery.jsonl")
    assert read_jsonl(out / "eval/video_ret_queries.jsonl") == gallery
    assert {row["video"] for row in gallery} == set(frames)
    counts: dict[str, int] = defaultdict(int)
    for row in gallery:
        assert row["identity"] == frames[row["video"]]["identity"]
        counts[row["identity"]] += 1
    assert min(counts.values()) >= 2  # every query clip has another clip of its identity
    for row in read_jsonl(out / "eval/video_cls.jsonl"):
        meta = frames[row["query"]["video"]]
        texts = [c["text"] for c in row["candidates"]]
        assert texts[0] == class_name(meta["identity_params"]["shape"], meta["motion"]["direction"])
        assert len(set(texts)) == len(texts) == VIDEO_SIZES["tiny"].candidates_per_query
        # The hard ones: the same shape moving the other three ways.
        assert sum(text.startswith(f"a {meta['identity_params']['shape']} moving") for text in texts) == len(MOTIONS)


def test_video_identities_are_new(out: Path) -> None:
    video = {row["identity"] for row in read_jsonl(out / "eval/meta/video.jsonl")}
    others = {row["identity"] for path in (out / "eval/meta").glob("*.jsonl") if path.stem not in ("video", "docs")
              for row in read_jsonl(path)}
    others |= {row["identity"] for row in read_jsonl(out / "train/meta/rec.jsonl")}
    assert video and not video & others


# --------------------------------------------------------------------------------------------
# Documents


def _page_text(meta: dict[str, Any]) -> str:
    page = meta["page"]
    return " ".join([*page["title"], *(line for lines in page["paragraphs"] for line in lines)]).lower()


def test_qrels_are_graded_and_every_query_has_its_page(out: Path) -> None:
    queries = read_jsonl(out / "eval/docs_queries.jsonl")
    corpus = {row["id"]: row for row in read_jsonl(out / "eval/docs_corpus.jsonl")}
    meta = {row["image"]: row for row in read_jsonl(out / "eval/meta/docs.jsonl")}
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for row in read_jsonl(out / "eval/docs_qrels.jsonl"):
        assert set(row) == {"query_id", "corpus_id", "score"} and row["corpus_id"] in corpus
        assert row["corpus_id"] not in qrels[row["query_id"]]
        qrels[row["query_id"]][row["corpus_id"]] = row["score"]
    assert all(set(row) == {"id", "text"} for row in queries)
    assert all(set(row) == {"id", "image"} and (out / "eval/images" / row["image"]).is_file()
               for row in corpus.values())
    assert set(qrels) == {q["id"] for q in queries}
    for query in queries:
        grades = qrels[query["id"]]
        assert set(grades.values()) == {1, 2} and list(grades.values()).count(2) == 1
        source = meta[corpus[next(c for c, g in grades.items() if g == 2)]["image"]]
        words = query["text"].split()
        # Written from its grade-2 page: every query word is on it...
        assert all(word in _page_text(source).split() or f"{word}." in _page_text(source).split() for word in words)
        for page_id, grade in grades.items():
            other = meta[corpus[page_id]["image"]]
            # ...grade 1: a page of its topic (sharing the title's topic words), not its keywords.
            assert other["topic"] == source["topic"]
            assert " ".join(other["page"]["title"]).split()[:2] == " ".join(source["page"]["title"]).split()[:2]
            if grade == 1:
                assert not set(words) & set(other["keywords"])
        # Every page off its topic is ungraded (0, omitted).
        off_topic = {cid for cid, c in corpus.items() if meta[c["image"]]["topic"] != source["topic"]}
        assert off_topic and not off_topic & set(grades)


def test_pages_are_rendered_words_that_re_render_from_metadata(out: Path) -> None:
    for meta in read_jsonl(out / "eval/meta/docs.jsonl"):
        data = (out / "eval/images" / meta["image"]).read_bytes()
        assert page_png(meta["page"]) == data
        pixels = np.asarray(Image.open(out / "eval/images" / meta["image"]).convert("L"))
        assert pixels.shape == (meta["page"]["height"], meta["page"]["width"])
        ink_rows = (pixels < 128).any(axis=1)
        assert ink_rows.sum() > 0.2 * len(ink_rows)  # several lines of text, not a blank page
        assert len(meta["page"]["paragraphs"]) >= 2 and meta["page"]["title"]


# --------------------------------------------------------------------------------------------
# Manifest, defaults, determinism


def test_manifest_entries_use_mmeb_v2_meta_tasks_and_validate(out: Path) -> None:
    found = entries(out)
    assert {name: found[name]["meta_task"] for name in ("SynthVideoRet", "SynthVideoCls", "SynthDocRet")} == \
        {"SynthVideoRet": "V-RET", "SynthVideoCls": "V-CLS", "SynthDocRet": "VR"}
    assert found["SynthVideoRet"]["layout"] == "gallery" and found["SynthVideoCls"]["layout"] == "candidates"
    doc = found["SynthDocRet"]
    assert doc["layout"] == "qrels" and {"queries", "corpus", "qrels"} <= set(doc)
    assert all((out / doc[key]).is_file() for key in ("queries", "corpus", "qrels"))
    for name in ("SynthVideoRet", "SynthVideoCls", "SynthDocRet"):
        entry = ManifestEntry.model_validate(found[name], context={"base": out})
        # MMEB-V2's tasks have no IND / OOD split: these never join the image tasks' split means
        assert entry.inferred_benchmark == "MMEB-V2" and "split" not in found[name]


def test_default_output_is_unchanged_and_the_image_part_is_shared(out: Path, tmp_path: Path) -> None:
    image_only = generate(tmp_path / "image", seed=0, size="tiny", workers=1)
    base, full = tree_digest(image_only), tree_digest(out)
    assert "video" not in json.dumps(json.loads((image_only / "synth.json").read_text()))
    assert not any(name.startswith(("eval/images/video", "eval/images/docs")) for name in base)
    changed = {name for name in base if full.get(name) != base[name]}
    assert changed == {"benchmark.yaml", "synth.json"}
    base_names = list(entries(image_only))
    assert list(entries(out))[: len(base_names)] == base_names


def test_same_seed_same_bytes_and_another_seed_other_clips_and_pages(out: Path, tmp_path: Path) -> None:
    again = generate(tmp_path / "again", seed=0, size="tiny", workers=2, modalities="video,image,document")
    assert tree_digest(again) == tree_digest(out)
    other = tree_digest(generate(tmp_path / "other", seed=1, size="tiny", workers=1, modalities=ALL))
    first = tree_digest(out)
    new = [name for name in first if name.startswith(("eval/images/video", "eval/images/docs"))]
    assert new and sum(other.get(name) != first[name] for name in new) > 0.9 * len(new)


def test_bad_modalities_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="unknown modality 'audio'"):
        generate(tmp_path / "x", size="tiny", modalities="image,audio")
    assert cli_main(["synth", str(tmp_path / "y"), "--size", "tiny", "--modalities", "video"]) == 2
    assert "must include image" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
