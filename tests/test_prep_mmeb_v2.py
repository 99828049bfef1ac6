"""``vis-embed prep mmeb-v2`` on local sources shaped like the released ones (tests/_mmeb_v2_fakes.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vis_embed.prep.mmeb_v2 import convert_mmeb_v2, select_tasks
from vis_embed.prep.mmeb_v2_sources import REVISIONS, all_tasks
from tests._mmeb_v2_fakes import frames, frames_archive, hub_dataset, jpeg, tarball
from vis_embed.cli import main as cli_main
from vis_embed.errors import DataError


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _frame_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_task_table_holds_the_78_tasks() -> None:
    tasks = all_tasks()
    by_modality = {m: [s for s in tasks.values() if s.modality == m] for m in ("image", "video", "visdoc")}
    assert [len(v) for v in by_modality.values()] == [36, 18, 24]
    assert all(s.repo in REVISIONS for s in tasks.values())  # every source pinned in the one table
    assert [s.name for s in select_tasks(["video"], ["MSVD", "MSR-VTT"])] == ["MSR-VTT", "MSVD"]  # table order


# ------------------------------------------------------------------ video

def test_column_rules() -> None:
    from vis_embed.prep.mmeb_v2_video import column_value

    row = {"video": {"bytes": None, "path": "clips/123_abc.mp4"}, "caption": ["first", "second"], "empty": None}
    assert column_value(row, "stem:video", "src", 1) == "123_abc"  # an undecoded datasets.Video value: its path
    assert column_value(row, "first:caption", "src", 1) == "first"
    with pytest.raises(DataError, match=r"src:3: field 'empty': no value"):
        column_value(row, "empty", "src", 3)
    with pytest.raises(DataError, match=r"src:3: field 'caption': expected a non-empty list"):
        column_value({"caption": []}, "first:caption", "src", 3)


def test_video_retrieval_writes_qrels_over_the_deduplicated_clip_pool(tmp_path: Path) -> None:
    src = tmp_path / "src"
    hub_dataset(src, "VLM2Vec/MSR-VTT", {"test_1k": {"test": [
        {"video_id": "video7010", "video": "video7010.mp4", "caption": "a man sings"},
        {"video_id": "video7020", "video": "video7020.mp4", "caption": "a dog runs"},
        {"video_id": "video7010", "video": "video7010.mp4", "caption": "someone sings"}]}})
    hub_dataset(src, "VLM2Vec/DiDeMo", {None: {"test": [
        {"video": "clips/123_abc.mp4", "caption": "the girl jumps"}]}})
    hub_dataset(src, "VLM2Vec/MSVD", {None: {"test": [{"video_id": "m1", "video": "m1.avi", "caption": ["c1", "c2"]}]}})
    hub_dataset(src, "VLM2Vec/VATEX", {None: {"test": [{"videoID": "vx", "enCap": ["first", "second"]}]}})
    hub_dataset(src, "lmms-lab/YouCook2", {None: {"val": [{"id": "yc_7", "video_path": "v.mp4", "sentence": "stir"}]}})
    frames_archive(src, "video_ret.tar.gz", {**frames("./MSR-VTT/video7010"), **frames("MSR-VTT/video7020", 2),
                                             **frames("MSR-VTT/unused"), **frames("DiDeMo/123_abc", 1),
                                             **frames("MSVD/m1"), **frames("VATEX/vx"), **frames("YouCook2/yc_7")})
    summary = convert_mmeb_v2(tmp_path / "out", modalities=["video"], source_root=src,
                              tasks=["MSR-VTT", "DiDeMo", "MSVD", "VATEX", "YouCook2"])
    assert summary["converted"] == ["DiDeMo", "MSR-VTT", "MSVD", "VATEX", "YouCook2"]  # the table's order
    for name, text, clip in (("MSVD", "c1", "m1"), ("VATEX", "first", "vx"), ("YouCook2", "stir", "yc_7")):
        folder = tmp_path / "out" / "video" / name
        assert _jsonl(folder / "queries.jsonl") == [{"id": "0", "text": text}]
        assert _jsonl(folder / "corpus.jsonl") == [{"id": clip, "video": f"media/{clip}"}]
        assert len(_frame_names(folder / "media" / clip)) == 3
    task = tmp_path / "out" / "video" / "MSR-VTT"
    assert _jsonl(task / "queries.jsonl") == [{"id": "0", "text": "a man sings"}, {"id": "1", "text": "a dog runs"},
                                              {"id": "2", "text": "someone sings"}]
    assert _jsonl(task / "corpus.jsonl") == [{"id": "video7010", "video": "media/video7010"},
                                             {"id": "video7020", "video": "media/video7020"}]
    assert _jsonl(task / "qrels.jsonl") == [{"query_id": "0", "corpus_id": "video7010", "score": 1},
                                            {"query_id": "1", "corpus_id": "video7020", "score": 1},
                                            {"query_id": "2", "corpus_id": "video7010", "score": 1}]
    assert _frame_names(task / "media" / "video7010") == ["frame_0001.jpg", "frame_0002.jpg", "frame_0003.jpg"]
    assert not (task / "media" / "unused").exists()  # only the task's clips are extracted
    manifest = json.loads((task / "manifest.json").read_text())
    assert (manifest["layout"], manifest["image_root"], manifest["rows"]["corpus.jsonl"]) == ("qrels", ".", 2)
    assert manifest["sources"][0] == {"repo": "VLM2Vec/MSR-VTT", "config": "test_1k", "split": "test",
                                      "revision": "main"}
    didemo = tmp_path / "out" / "video" / "DiDeMo"
    assert _jsonl(didemo / "corpus.jsonl") == [{"id": "123_abc", "video": "media/123_abc"}]  # the path's stem


def test_video_classification_global_labels_and_ssv2_local_positive_first(tmp_path: Path) -> None:
    src = tmp_path / "src"
    hub_dataset(src, "VLM2Vec/HMDB51", {None: {"test": [
        {"video_id": "v1", "pos_text": "ride_bike"}, {"video_id": "v2", "pos_text": "wave"},
        {"video_id": "v3", "pos_text": "ride_bike"}]}})
    for repo, folder in (("VLM2Vec/UCF101", "UCF101"), ("VLM2Vec/Breakfast", "Breakfast"),
                         ("VLM2Vec/Kinetics-700", "K700")):
        hub_dataset(src, repo, {None: {"test": [{"video_id": f"{folder}_clip", "pos_text": f"{folder} label"}]}})
    hub_dataset(src, "VLM2Vec/SmthSmthV2", {None: {"test": [
        {"video_id": 42, "pos_text": "Folding something", "neg_text": ["Opening something", "Folding something",
                                                                       "Closing something"]}]}})
    frames_archive(src, "video_cls.tar.gz", {**frames("HMDB51/v1"), **frames("HMDB51/v2"), **frames("HMDB51/v3"),
                                             **frames("SSv2/42", 8), **frames("UCF101/UCF101_clip"),
                                             **frames("Breakfast/Breakfast_clip"), **frames("K700/K700_clip")})
    convert_mmeb_v2(tmp_path / "out", tasks=["HMDB51", "SmthSmthV2", "UCF101", "Breakfast", "K700"], source_root=src)
    for name, folder in (("UCF101", "UCF101"), ("Breakfast", "Breakfast"), ("K700", "K700")):
        task = tmp_path / "out" / "video" / name
        assert _jsonl(task / "queries.jsonl") == [{"id": "0", "video": f"media/{folder}_clip"}]
        assert _jsonl(task / "corpus.jsonl") == [{"id": f"{folder} label", "text": f"{folder} label"}]
    hmdb = tmp_path / "out" / "video" / "HMDB51"
    assert _jsonl(hmdb / "queries.jsonl")[0] == {"id": "0", "video": "media/v1"}
    assert _jsonl(hmdb / "corpus.jsonl") == [{"id": "ride_bike", "text": "ride_bike"}, {"id": "wave", "text": "wave"}]
    assert [(q["query_id"], q["corpus_id"]) for q in _jsonl(hmdb / "qrels.jsonl")] == [
        ("0", "ride_bike"), ("1", "wave"), ("2", "ride_bike")]
    (row,) = _jsonl(tmp_path / "out" / "video" / "SmthSmthV2" / "SmthSmthV2.jsonl")
    assert row == {"id": "0", "query": {"video": "media/42"}, "candidates": [
        {"text": "Folding something"}, {"text": "Opening something"}, {"text": "Closing something"}]}
    assert len(_frame_names(tmp_path / "out" / "video" / "SmthSmthV2" / "media" / "42")) == 8


def test_video_qa_options_answer_first_multipart_archive_and_pooled_configs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    hub_dataset(src, "VLM2Vec/Video-MME", {None: {"test": [
        {"videoID": "fFjv93ACGo8", "question": "What is shown?", "options": ["A. a cat", "B. a dog", "C. a cow",
                                                                             "D. a fox"],
         "answer": "C", "question_id": "001-1", "domain": "x", "sub_category": "y"}]}})
    hub_dataset(src, "VLM2Vec/MVBench", {
        "action_sequence": {"train": [{"video": "a.mp4", "question": "First?", "candidates": ["sit", "stand"],
                                       "answer": "stand"}]},
        "object_shuffle": {"train": [{"video": "b.mp4", "question": "Where?", "candidates": ["left", "right", "up"],
                                      "answer": "left"}]}})
    hub_dataset(src, "VLM2Vec/ActivityNetQA", {None: {"test": [
        {"video_name": "abc", "question": "is it raining", "answer": "no", "question_id": "q1"}]}})
    hub_dataset(src, "VLM2Vec/NExTQA", {"MC": {"test": [
        {"video": 4010069381, "question": "why run", "answer": 3, "qid": 7, "type": "CW",
         **{f"a{k}": f"answer {k}" for k in range(5)}}]}})
    hub_dataset(src, "VLM2Vec/EgoSchema", {"Subset": {"test": [
        {"video_idx": "ego1", "question": "Goal?", "answer": "1", "question_idx": "0",
         "option": ["A. cook.", "B. clean.", "C. read."]}]}})
    frames_archive(src, "video_qa.tar.gz", {**frames("video_qa/Video-MME/fFjv93ACGo8"),
                                            **frames("video_qa/NExTQA/4010069381"), **frames("video_qa/EgoSchema/ego1"),
                                            **frames("video_qa/MVBench/action_sequence/a.mp4"),
                                            **frames("video_qa/MVBench/object_shuffle/b.mp4"),
                                            **frames("video_qa/ActivityNetQA/v_abc")}, parts=5)
    convert_mmeb_v2(tmp_path / "out", tasks=["Video-MME", "MVBench", "ActivityNetQA", "NExTQA", "EgoSchema"],
                    source_root=src)
    video = tmp_path / "out" / "video"
    (mme,) = _jsonl(video / "Video-MME" / "Video-MME.jsonl")
    assert mme["query"] == {"text": "What is shown?\nA. a cat\nB. a dog\nC. a cow\nD. a fox",
                            "video": "media/fFjv93ACGo8"}
    assert [c["text"] for c in mme["candidates"]] == ["a cow", "a cat", "a dog", "a fox"]  # answer first
    first, second = _jsonl(video / "MVBench" / "MVBench.jsonl")
    assert first["query"] == {"text": "First?\nOptions:\n(A) sit\n(B) stand", "video": "media/action_sequence/a.mp4"}
    assert [c["text"] for c in first["candidates"]] == ["(B) stand", "(A) sit"]
    assert second["query"]["video"] == "media/object_shuffle/b.mp4"
    assert _frame_names(video / "MVBench" / "media" / "object_shuffle" / "b.mp4") == [
        "frame_0001.jpg", "frame_0002.jpg", "frame_0003.jpg"]
    (anet,) = _jsonl(video / "ActivityNetQA" / "ActivityNetQA.jsonl")
    assert anet["query"]["text"] == "is it raining? (A) yes; (B) no." and anet["query"]["video"] == "media/v_abc"
    assert anet["candidates"] == [{"text": "no"}, {"text": "yes"}]
    (nextqa,) = _jsonl(video / "NExTQA" / "NExTQA.jsonl")
    assert nextqa["query"]["text"] == "why run\nOptions:\n" + "\n".join(f"({'ABCDE'[k]}) answer {k}" for k in range(5))
    assert [c["text"] for c in nextqa["candidates"]] == ["answer 3", "answer 0", "answer 1", "answer 2", "answer 4"]
    (ego,) = _jsonl(video / "EgoSchema" / "EgoSchema.jsonl")
    assert ego["query"] == {"text": "Goal?A. cook. B. clean. C. read.", "video": "media/ego1"}
    assert [c["text"] for c in ego["candidates"]] == ["clean.", "cook.", "read."]


def test_moment_retrieval_clips_positive_first_and_several_positives(tmp_path: Path) -> None:
    src = tmp_path / "src"
    hub_dataset(src, "VLM2Vec/QVHighlight", {None: {"test": [
        {"query": "a man cooks", "video_path": "videos/vid_1.mp4"}]}})
    hub_dataset(src, "VLM2Vec/Charades-STA", {None: {"test": [
        {"query": "a person opens a door", "video_path": "AB12.mp4"}]}})
    hub_dataset(src, "VLM2Vec/MomentSeeker", {None: {"test": [
        {"query": "the goal", "input_frames": "",
         "positive_frames": [{"output_path": "m/p1.mp4"}, {"output_path": "m/p2.mp4"}],
         "negative_frames": [{"output_path": "m/n1.mp4"}]},
        {"query": "this person", "input_frames": "q1.jpg",
         "positive_frames": [{"output_path": "m/p1.mp4"}], "negative_frames": [{"output_path": "m/n1.mp4"}]}]}})
    members = {**frames("video_mret/QVHighlight/vid_1/query", 8), **frames("video_mret/QVHighlight/vid_1/negative_0"),
               **frames("video_mret/QVHighlight/vid_1/positive_4"), **frames("video_mret/QVHighlight/vid_1/negative_1"),
               **{f"video_mret/MomentSeeker/video_frames/m_{c}/f_{k}.jpg": jpeg() for c in ("p1", "p2", "n1")
                  for k in range(2)},
               "video_mret/MomentSeeker/query_q1.jpg": jpeg(),
               **frames("video_mret/Charades_STA/AB12/query"), **frames("video_mret/Charades_STA/AB12/positive")}
    frames_archive(src, "video_mret.tar.gz", members)
    convert_mmeb_v2(tmp_path / "out", tasks=["QVHighlight", "MomentSeeker", "Charades-STA"], source_root=src)
    (charades,) = _jsonl(tmp_path / "out" / "video" / "Charades-STA" / "Charades-STA.jsonl")
    assert charades["candidates"] == [{"video": "media/AB12/positive"}]
    (row,) = _jsonl(tmp_path / "out" / "video" / "QVHighlight" / "QVHighlight.jsonl")
    assert row["query"] == {"text": "a man cooks", "video": "media/vid_1/query"}
    assert row["candidates"] == [{"video": "media/vid_1/positive_4"}, {"video": "media/vid_1/negative_0"},
                                 {"video": "media/vid_1/negative_1"}]
    assert "positives" not in row
    two, one = _jsonl(tmp_path / "out" / "video" / "MomentSeeker" / "MomentSeeker.jsonl")
    assert two["positives"] == 2 and [c["video"] for c in two["candidates"]] == [
        "media/video_frames/m_p1", "media/video_frames/m_p2", "media/video_frames/m_n1"]
    assert one["query"] == {"text": "this person", "image": "media/query_q1.jpg"} and "positives" not in one
    assert (tmp_path / "out" / "video" / "MomentSeeker" / "media" / "query_q1.jpg").is_file()


# ------------------------------------------------------------------ visual documents

def _beir(src: Path, repo: str, queries: list[dict], corpus_ids: list, qrels: list[dict], split: str = "test") -> None:
    corpus = [{"corpus-id": cid, "image": {"bytes": jpeg((k, 0, 0), "PNG"), "path": None}}
              for k, cid in enumerate(corpus_ids)]
    hub_dataset(src, repo, {"queries": {split: queries}, "corpus": {split: corpus}, "qrels": {split: qrels}},
                image_columns=("image",))


def test_vidore_graded_qrels_and_pooled_multilingual_queries(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _beir(src, "vidore/arxivqa_test_subsampled_beir",
          [{"query-id": 0, "query": "what is the loss?"}, {"query-id": 1, "query": "no answer"},
           {"query-id": 2, "query": "which figure?"}],
          [10, 11, 12],
          [{"query-id": 0, "corpus-id": 11, "score": 1}, {"query-id": 0, "corpus-id": 10, "score": 2},
           {"query-id": 0, "corpus-id": 10, "score": 1}, {"query-id": 1, "corpus-id": 12, "score": 0},
           {"query-id": 2, "corpus-id": 12, "score": 1}])
    _beir(src, "vidore/esg_reports_v2",
          [{"query-id": 5, "query": "emissions?", "language": "english"},
           {"query-id": 5, "query": "émissions ?", "language": "french"}],
          [1, 2], [{"query-id": 5, "corpus-id": 2, "score": 2}])
    convert_mmeb_v2(tmp_path / "out", tasks=["ViDoRe_arxivqa", "ViDoRe_esg_reports_v2_multilingual"], source_root=src)
    task = tmp_path / "out" / "visdoc" / "ViDoRe_arxivqa"
    assert _jsonl(task / "queries.jsonl") == [{"id": "0", "text": "what is the loss?"},
                                              {"id": "2", "text": "which figure?"}]  # 1: nothing relevant
    # graded, a repeated pair at its higher grade, grade 0 dropped, in the source's order
    assert _jsonl(task / "qrels.jsonl") == [{"query_id": "0", "corpus_id": "11", "score": 1},
                                            {"query_id": "0", "corpus_id": "10", "score": 2},
                                            {"query_id": "2", "corpus_id": "12", "score": 1}]
    corpus = _jsonl(task / "corpus.jsonl")
    assert [c["id"] for c in corpus] == ["10", "11", "12"]
    assert all((task / c["image"]).read_bytes().startswith(b"\x89PNG") for c in corpus)
    manifest = json.loads((task / "manifest.json").read_text())
    assert manifest["queries_without_relevant_pages"] == 1
    esg = tmp_path / "out" / "visdoc" / "ViDoRe_esg_reports_v2_multilingual"
    assert _jsonl(esg / "queries.jsonl") == [{"id": "5-english", "text": "emissions?"},
                                             {"id": "5-french", "text": "émissions ?"}]
    assert _jsonl(esg / "qrels.jsonl") == [{"query_id": "5-english", "corpus_id": "2", "score": 2},
                                           {"query_id": "5-french", "corpus_id": "2", "score": 2}]
    assert json.loads((esg / "manifest.json").read_text())["languages"] == ["english", "french"]


def test_visrag_long_file_name_ids_and_page_fixed_ood(tmp_path: Path) -> None:
    src = tmp_path / "src"
    long_id = "x" * 120 + ".png"
    _beir(src, "openbmb/VisRAG-Ret-Test-ChartQA", [{"query-id": "q-a", "query": "max value?"}],
          [long_id, "short.png"], [{"query-id": "q-a", "corpus-id": long_id, "score": 1}], split="train")
    _beir(src, "VLM2Vec/ViDoSeek-page-fixed", [{"query-id": 1, "query": "revenue 2023?"}],
          ["doc1_3"], [{"query-id": 1, "corpus-id": "doc1_3", "score": 1}])
    convert_mmeb_v2(tmp_path / "out", tasks=["VisRAG_ChartQA", "ViDoSeek-page"], source_root=src)
    visrag = tmp_path / "out" / "visdoc" / "VisRAG_ChartQA"
    page = _jsonl(visrag / "corpus.jsonl")[0]
    assert page["id"] == long_id and len(Path(page["image"]).name) < 70 and (visrag / page["image"]).is_file()
    assert _jsonl(visrag / "qrels.jsonl") == [{"query_id": "q-a", "corpus_id": long_id, "score": 1}]
    ood = json.loads((tmp_path / "out" / "visdoc" / "ViDoSeek-page" / "manifest.json").read_text())
    assert ood["sources"][0]["repo"] == "VLM2Vec/ViDoSeek-page-fixed"
    provenance = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert set(provenance["tasks"]) == {"VisRAG_ChartQA", "ViDoSeek-page"}
    assert provenance["revisions"] == {"VLM2Vec/ViDoSeek-page-fixed": "main", "openbmb/VisRAG-Ret-Test-ChartQA": "main"}


# ------------------------------------------------------------------ image tasks (today's MMEB-eval converter)

def test_image_tasks_through_the_mmeb_eval_converter_one_archive_read(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from vis_embed.prep import mmeb_v2_media
    from vis_embed.data import load_candidates

    src = tmp_path / "src"
    hub_dataset(src, "TIGER-Lab/MMEB-eval", {
        "ImageNet-1K": {"test": [
            {"qry_text": "<|image_1|>\nRepresent the given image for classification\n",
             "qry_img_path": "ImageNet-1K/Query/q.jpg", "tgt_text": ["tench", "goldfish"], "tgt_img_path": ["", ""]}]},
        "MSCOCO_t2i": {"test": [{"qry_text": "a dog", "qry_img_path": "", "tgt_text": ["<|image_1|>", "<|image_1|>"],
                                 "tgt_img_path": ["Shared/dog.jpg", "Shared/cat.jpg"]}]},
        "MSCOCO_i2t": {"test": [{"qry_text": "<|image_1|>\nCaption it", "qry_img_path": "Shared/dog.jpg",
                                 "tgt_text": ["a dog"], "tgt_img_path": [""]}]}})
    tarball(src / "TIGER-Lab/MMEB-V2/image-tasks/mmeb_v1.tar.gz",
            {"MMEB/ImageNet-1K/Query/q.jpg": jpeg(), "MMEB/ImageNet-1K/Query/other.jpg": jpeg(),
             "MMEB/Shared/dog.jpg": jpeg(), "MMEB/Shared/cat.jpg": jpeg()})
    reads = []
    opened = mmeb_v2_media._Concatenated.__init__
    monkeypatch.setattr(mmeb_v2_media._Concatenated, "__init__",
                        lambda self, paths, bar: (reads.append(paths), opened(self, paths, bar))[1])
    convert_mmeb_v2(tmp_path / "out", modalities=["image"], tasks=["ImageNet-1K", "MSCOCO_i2t", "MSCOCO_t2i"],
                    source_root=src)
    assert len(reads) == 1  # the tasks that share the archive read it once
    task = tmp_path / "out" / "image" / "ImageNet-1K"
    (row,) = load_candidates(task / "ImageNet-1K.jsonl", task)
    assert row.query == {"image": str(task / "media/ImageNet-1K/Query/q.jpg"),
                         "text": "Represent the given image for classification"}
    assert [c["text"] for c in row.candidates] == ["tench", "goldfish"]
    assert not (task / "media/ImageNet-1K/Query/other.jpg").exists()
    for name in ("MSCOCO_i2t", "MSCOCO_t2i"):  # an image two tasks name is in both
        assert (tmp_path / "out" / "image" / name / "media" / "Shared" / "dog.jpg").is_file()
    t2i = tmp_path / "out" / "image" / "MSCOCO_t2i"
    assert [c["image"] for c in load_candidates(t2i / "MSCOCO_t2i.jsonl", t2i)[0].candidates] == [
        str(t2i / "media/Shared/dog.jpg"), str(t2i / "media/Shared/cat.jpg")]
    hub_dataset(src, "TIGER-Lab/MMEB-eval", {"N24News": {"test": [{"qry_text": "x", "qry_img_path": "a.jpg"}]}})
    with pytest.raises(DataError, match=r"TIGER-Lab/MMEB-eval \[N24News\]:1: field 'tgt_text': missing MMEB column"):
        convert_mmeb_v2(tmp_path / "out", tasks=["N24News"], source_root=src)


# ------------------------------------------------------------------ resumability, bad input, the command

def _msvd(src: Path, caption_column: str = "caption") -> None:
    hub_dataset(src, "VLM2Vec/MSVD", {None: {"test": [
        {"video_id": "clip_a", "video": "clip_a.avi", caption_column: ["a cat plays", "cat"]}]}})
    frames_archive(src, "video_ret.tar.gz", {**frames("MSVD/clip_a"), "MSVD/../../evil.jpg": jpeg(),
                                             "MSVD/clip_a/notes.txt": b"x"})


def test_complete_tasks_are_skipped_and_leftovers_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    _msvd(src)
    assert convert_mmeb_v2(out, tasks=["MSVD"], source_root=src)["converted"] == ["MSVD"]
    task = out / "video" / "MSVD"
    assert _jsonl(task / "queries.jsonl") == [{"id": "0", "text": "a cat plays"}]  # the first caption
    assert _frame_names(task / "media" / "clip_a") == ["frame_0001.jpg", "frame_0002.jpg", "frame_0003.jpg"]
    assert not any(p.name == "evil.jpg" for p in tmp_path.rglob("*"))  # a "../" member is never written
    assert convert_mmeb_v2(out, tasks=["MSVD"], source_root=src) == {
        "converted": [], "skipped_complete": ["MSVD"], "provenance": str(out / "provenance.json")}
    leftover = out / "video" / ".MSVD.tmp-crashed"
    leftover.mkdir()
    manifest = json.loads((task / "manifest.json").read_text())
    (task / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))  # an unfinished task
    assert convert_mmeb_v2(out, tasks=["MSVD"], source_root=src)["converted"] == ["MSVD"]
    assert not leftover.exists() and json.loads((task / "manifest.json").read_text())["complete"] is True
    monkeypatch.setitem(REVISIONS, "VLM2Vec/MSVD", "0123abcd")  # another pinned revision: converted again
    assert convert_mmeb_v2(out, tasks=["MSVD"], source_root=src)["converted"] == ["MSVD"]
    assert json.loads((out / "provenance.json").read_text())["revisions"]["VLM2Vec/MSVD"] == "0123abcd"


def test_bad_input_names_the_file_and_field(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _msvd(src, caption_column="text")
    with pytest.raises(DataError, match=r"VLM2Vec/MSVD:1: field 'caption': missing column 'caption'"):
        convert_mmeb_v2(tmp_path / "out", tasks=["MSVD"], source_root=src)
    assert [p.name for p in (tmp_path / "out" / "video").iterdir()] == []  # nothing half-written, no staging left
    _beir(src, "vidore/docvqa_test_subsampled_beir", [{"query-id": 0, "text": "q"}], [1],
          [{"query-id": 0, "corpus-id": 1, "score": 1}])
    with pytest.raises(DataError, match=r"docvqa_test_subsampled_beir \[queries\]: field 'query': missing column"):
        convert_mmeb_v2(tmp_path / "out", tasks=["ViDoRe_docvqa"], source_root=src)
    shard = src / "VLM2Vec/MSVD/data/test-00000-of-00001.parquet"  # a second shard with other columns
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist([{"other": 1}]), shard.with_name("test-00001-of-00002.parquet"))
    with pytest.raises(DataError, match=r"VLM2Vec/MSVD: cannot load split 'test'"):
        convert_mmeb_v2(tmp_path / "out", tasks=["MSVD"], source_root=src)
    hub_dataset(src, "VLM2Vec/HMDB51", {None: {"test": [{"video_id": "gone", "pos_text": "wave"}]}})
    frames_archive(src, "video_cls.tar.gz", frames("HMDB51/other"))
    with pytest.raises(DataError, match=r"video_cls.tar.gz: 1 clip.*not in the archive under 'HMDB51', e.g. gone"):
        convert_mmeb_v2(tmp_path / "out", tasks=["HMDB51"], source_root=src)
    shard.with_name("test-00001-of-00002.parquet").unlink()
    _msvd(src)
    with pytest.raises(DataError, match="docvqa"):  # MSVD completes before ViDoRe_docvqa fails
        convert_mmeb_v2(tmp_path / "out", tasks=["MSVD", "ViDoRe_docvqa"], source_root=src)
    assert list(json.loads((tmp_path / "out" / "provenance.json").read_text())["tasks"]) == ["MSVD"]


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    _msvd(src)
    args = ["prep", "mmeb-v2", "--out", str(tmp_path / "out"), "--source-root", str(src)]
    assert cli_main([*args, "--modality", "video", "--tasks", "MSVD"]) == 0
    assert "converted 1 task(s), skipped 0 complete" in capsys.readouterr().out
    assert cli_main([*args, "--tasks", "MSVD,NoSuchTask"]) == 2
    assert "unknown MMEB-V2 task 'NoSuchTask'" in capsys.readouterr().err
    assert cli_main([*args, "--modality", "audio"]) == 2
    assert "unknown modality 'audio'" in capsys.readouterr().err
    assert cli_main([*args, "--modality", "visdoc", "--tasks", "MSVD"]) == 2  # not silently nothing
    assert "task 'MSVD' is a video task, outside --modality visdoc" in capsys.readouterr().err
    assert cli_main([*args, "--tasks", "MSR-VTT"]) == 2  # its annotation set is not in the source root
    assert "VLM2Vec/MSR-VTT" in capsys.readouterr().err
