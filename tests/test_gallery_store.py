"""`vis-embed index` / `vis-embed search`: the persistent index (gallery/store.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vis_embed.cli import main
from vis_embed.errors import ConfigError, DataError
from vis_embed.gallery.search import numpy_topk
from vis_embed.gallery.index_choice import FLAT_AUTO_ROWS, resolve_index
from vis_embed.gallery.store import GalleryIndex, write_index
from vis_embed.vectors.transforms import l2_normalise


def _encoded(tmp_path: Path, rows: int = 300, dim: int = 32, seed: int = 0, dtype=np.float32) -> Path:
    """An encode output (matrix + .ids.json) of clustered unit vectors."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((rows // 3, dim))
    vectors = l2_normalise(centres[rng.integers(0, len(centres), rows)] + 0.3 * rng.standard_normal((rows, dim)))
    path = tmp_path / f"emb{seed}.npy"
    np.save(path, vectors.astype(dtype))
    record = {"lines": list(range(1, rows + 1)), "ids": [f"g{i}" for i in range(rows)],
              "model": {"name": "m", "adapter": None, "fingerprint": "fp-m"}, "embedding_config": {}}
    path.with_suffix(".ids.json").write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("rows, dim, budget, kind", [
    (1000, 64, 2 ** 30, "flat"),
    (FLAT_AUTO_ROWS + 1, 64, 2 ** 30, "binary"),   # too many rows to scan floats
    (1000, 64, 1000 * 255, "binary"),               # floats (256 B) do not fit, binary codes (8 B) do
    (1000, 64, 1000 * 8, "binary"),
])
def test_auto_picks_by_size_and_budget(rows, dim, budget, kind) -> None:
    assert resolve_index("auto", dim, rows, budget).kind == kind


@pytest.mark.parametrize("budget_per_vector, pq_bytes", [(150, 64), (56, 48), (9, 1)])
def test_auto_falls_back_to_ivf_pq_with_the_bytes_that_fit(budget_per_vector, pq_bytes) -> None:
    choice = resolve_index("auto", 1536, 1000, 1000 * budget_per_vector)   # binary needs 192 B a vector
    assert (choice.kind, choice.spec.pq_bytes) == ("ivf-pq", pq_bytes)


def test_a_budget_below_any_index_is_refused() -> None:
    with pytest.raises(ConfigError, match="holds no index of 1000 vectors"):
        resolve_index("auto", 1536, 1000, 1000 * 8)


def test_a_named_kind_over_budget_is_refused() -> None:
    with pytest.raises(ConfigError, match="--memory: a flat index of 1000 x 64 needs"):
        resolve_index("flat", 64, 1000, 1000 * 100)


@pytest.mark.parametrize("kind", ["flat", "binary", "int8"])
def test_an_index_with_a_covering_rescore_finds_the_exact_top_k(tmp_path: Path, kind: str) -> None:
    embeddings = _encoded(tmp_path)
    settings = write_index(embeddings, tmp_path / "idx", kind=kind)
    assert settings.kind == kind and settings.rows == 300 and settings.fingerprint == "fp-m"
    index = GalleryIndex.load(tmp_path / "idx", rescore=None if kind == "flat" else 300)
    queries = np.load(embeddings)[:10] + 0.01
    scores, rows = index.search(queries, 5)
    np.testing.assert_array_equal(rows, numpy_topk(l2_normalise(queries), np.load(embeddings), 5)[1])
    assert index.ids[rows[0, 0]] == "g0"


def test_ivf_pq_recalls_most_neighbours(tmp_path: Path) -> None:
    embeddings = _encoded(tmp_path, rows=2000)
    settings = write_index(embeddings, tmp_path / "idx", kind="ivf-pq")
    assert settings.bytes_per_vector == settings.pq_bytes + 8
    index = GalleryIndex.load(tmp_path / "idx")
    gallery = np.load(embeddings)
    _scores, rows = index.search(gallery[:50], 10)
    exact = numpy_topk(gallery[:50], gallery, 10)[1]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, exact)])
    assert recall >= 0.8


def test_index_json_is_written_and_read_as_index_settings(tmp_path: Path) -> None:
    """index.json holds the keys it always held (none dropped), and loads back as IndexFile."""
    settings = write_index(_encoded(tmp_path, rows=2000), tmp_path / "idx", kind="ivf-pq")
    written = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert set(written) == {"format_version", "kind", "kind_requested", "kind_reason", "rows", "dim",
                            "bytes_per_vector", "memory_budget_gb", "memory_given", "rescore", "nlist", "nprobe",
                            "pq_bytes", "pq_bits", "embeddings", "model", "embedding_config"}
    loaded = GalleryIndex.load(tmp_path / "idx").settings
    assert loaded == settings and loaded.as_json() == written
    flat = write_index(_encoded(tmp_path), tmp_path / "flat", kind="flat").as_json()
    assert "nlist" not in flat and flat["model"]["fingerprint"] == "fp-m"


@pytest.mark.parametrize("shape", ["first", "minimal"])
def test_an_index_json_of_the_old_shape_loads(tmp_path: Path, shape: str) -> None:
    """An index.json as the first writer wrote it (a raw dict, no model recorded) or with only the
    required keys, plus a key a newer writer might add: it loads, searches and keeps the extra key."""
    embeddings = _encoded(tmp_path)
    write_index(embeddings, tmp_path / "idx", kind="binary")
    path = tmp_path / "idx" / "index.json"
    first = {"format_version": 1, "kind": "binary", "kind_requested": "binary", "kind_reason": "requested",
             "rows": 300, "dim": 32, "bytes_per_vector": 4, "memory_budget_gb": 8.0, "memory_given": False,
             "rescore": 4, "embeddings": str(embeddings), "model": None, "embedding_config": None}
    old = first if shape == "first" else {key: first[key] for key in ("format_version", "kind", "rows", "dim")}
    path.write_text(json.dumps({**old, "added_later": [1, 2]}))
    with pytest.raises(DataError, match="no model fingerprint"):
        GalleryIndex.load(tmp_path / "idx").require_model()
    index = GalleryIndex.load(tmp_path / "idx")
    index.check_queries("fp-other", 32, allow_any_model=True)
    assert index.settings.fingerprint is None and index.settings.model_extra == {"added_later": [1, 2]}
    assert index.rescore == (4 if shape == "first" else 0) and index.spec.kind == "binary"
    assert index.search(np.load(embeddings)[:2], 3)[1].shape == (2, 3)


def test_a_rebuild_replaces_the_directory_whole(tmp_path: Path) -> None:
    write_index(_encoded(tmp_path), tmp_path / "idx", kind="binary")
    write_index(_encoded(tmp_path, rows=90, seed=1), tmp_path / "idx", kind="flat")
    assert not (tmp_path / "idx" / "vectors.npy").exists()   # nothing of the binary index left
    assert len(GalleryIndex.load(tmp_path / "idx").ids) == 90
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".idx")] == []


def test_queries_of_another_model_or_width_are_refused(tmp_path: Path) -> None:
    write_index(_encoded(tmp_path), tmp_path / "idx", kind="flat")
    index = GalleryIndex.load(tmp_path / "idx")
    index.check_queries("fp-m", 32)
    with pytest.raises(DataError, match="field 'model': the index holds vectors of another model"):
        index.check_queries("fp-other", 32)
    with pytest.raises(DataError, match="field 'dim'"):
        index.check_queries("fp-m", 16)
    with pytest.raises(DataError, match="queries are 16 wide"):
        index.search(np.ones((1, 16), dtype=np.float32), 3)


def test_cli_exit_2_naming_the_problem(tmp_path: Path, capsys) -> None:
    assert main(["index", "--embeddings", str(tmp_path / "missing.npy"), "--out", str(tmp_path / "i")]) == 2
    assert "embedding matrix not found" in capsys.readouterr().err
    embeddings = _encoded(tmp_path)
    assert main(["index", "--embeddings", str(embeddings), "--out", str(tmp_path / "i"), "--memory", "-1"]) == 2
    assert "--memory must be a positive number" in capsys.readouterr().err
    np.save(tmp_path / "q.npy", np.packbits(np.load(embeddings) > 0, axis=1))
    (tmp_path / "q.ids.json").write_text(json.dumps({"lines": list(range(300))}))
    assert main(["index", "--embeddings", str(tmp_path / "q.npy"), "--out", str(tmp_path / "i")]) == 2
    assert "field 'embeddings': expected float vectors" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()
    assert main(["index", "--embeddings", str(embeddings), "--out", str(tmp_path / "i"), "--kind", "int8"]) == 0
    assert "wrote a int8 index of 300 x 32 (32 B a vector" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["index", "--embeddings", str(embeddings), "--out", str(tmp_path / "i"), "--kind", "hnsw"])


def test_search_end_to_end_with_the_model_that_encoded_the_gallery(tmp_path: Path, tiny_checkpoint, capsys) -> None:
    model = str(tiny_checkpoint())
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"doc{i}", "text": f"item number {i}"}) + "\n" for i in range(8)))
    assert main(["encode", "--model", model, "--input", str(items), "--output", str(tmp_path / "g.npy"),
                 "--no-progress"]) == 0
    assert main(["index", "--embeddings", str(tmp_path / "g.npy"), "--out", str(tmp_path / "idx"),
                 "--kind", "binary"]) == 0
    assert main(["search", "--model", model, "--index", str(tmp_path / "idx"), "--input", str(items),
                 "--k", "3", "--output", str(tmp_path / "hits.jsonl"), "--instruction", "", "--no-progress",
                 "--rescore", "8"]) == 0
    hits = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text().splitlines()]
    assert [row["id"] for row in hits] == [f"doc{i}" for i in range(8)]
    assert all(len(row["hits"]) == 3 for row in hits)
    assert all(row["hits"][0]["id"] == row["id"] for row in hits)  # each item finds itself first
    other = tiny_checkpoint(seed=1)
    capsys.readouterr()
    assert main(["search", "--model", str(other), "--index", str(tmp_path / "idx"), "--input", str(items),
                 "--output", str(tmp_path / "other.jsonl"), "--no-progress"]) == 2
    assert "field 'model'" in capsys.readouterr().err and not (tmp_path / "other.jsonl").exists()


def test_duplicate_ids_and_a_damaged_directory_are_named(tmp_path: Path) -> None:
    embeddings = _encoded(tmp_path, rows=30)
    record = json.loads(embeddings.with_suffix(".ids.json").read_text())
    record["ids"][7] = record["ids"][3]
    embeddings.with_suffix(".ids.json").write_text(json.dumps(record))
    with pytest.raises(DataError, match="field 'ids': rows 3 and 7 share the id 'g3'"):
        write_index(embeddings, tmp_path / "idx")
    record["ids"][7] = None  # falls back to the row number
    embeddings.with_suffix(".ids.json").write_text(json.dumps(record))
    write_index(embeddings, tmp_path / "idx")
    (tmp_path / "idx" / "ids.json").write_text("[1, 2")
    with pytest.raises(DataError, match="field 'ids': unreadable ids"):
        GalleryIndex.load(tmp_path / "idx")
    with pytest.raises(DataError, match="field 'index': not an index directory"):
        GalleryIndex.load(tmp_path)


def test_index_out_replaces_only_an_index_directory(tmp_path: Path, capsys) -> None:
    """--out holding other files, a regular file, or a folder holding the --embeddings is refused
    (exit 2 naming --out) and left as it was; an index directory or an empty one is replaced."""
    embeddings = _encoded(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("gallery.npy", "gallery.ids.json", "notes.txt"):
        (work / name).write_text(name)
    (tmp_path / "a_file").write_text("keep")
    inside = tmp_path / "with_input"
    inside.mkdir()
    index = _encoded(inside)  # an index directory (index.json) that also holds the encode output
    write_index(index, tmp_path / "made")
    (inside / "index.json").write_bytes((tmp_path / "made" / "index.json").read_bytes())
    for out, problem in ((work, "holds files and is not an index directory"), (tmp_path / "a_file", "is a file"),
                         (inside, "holds the input")):
        before = {path.name: path.read_bytes() for path in out.iterdir()} if out.is_dir() else out.read_bytes()
        assert main(["index", "--embeddings", str(index if out == inside else embeddings), "--out", str(out)]) == 2
        assert f"error: --out {out}: {problem}" in capsys.readouterr().err
        assert before == ({path.name: path.read_bytes() for path in out.iterdir()} if out.is_dir()
                          else out.read_bytes())
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "made"):
        assert main(["index", "--embeddings", str(embeddings), "--out", str(out), "--kind", "flat"]) == 0
        assert GalleryIndex.load(out).ntotal == 300


def test_nan_embeddings_name_their_first_row_and_input_line(tmp_path: Path) -> None:
    embeddings = _encoded(tmp_path, rows=30)
    vectors = np.load(embeddings)
    vectors[[7, 12]] = np.nan
    np.save(embeddings, vectors)
    with pytest.raises(DataError, match=r"emb0\.npy: field 'embeddings': row 7 \(input line 8\) holds NaN or "
                                        r"infinite values \(2 such rows\)"):
        write_index(embeddings, tmp_path / "idx")


def test_a_query_array_of_another_shape_is_a_data_error_saying_the_shape_needed(tmp_path: Path) -> None:
    embeddings = _encoded(tmp_path)
    write_index(embeddings, tmp_path / "idx", kind="flat")
    index = GalleryIndex.load(tmp_path / "idx")
    query = np.load(embeddings)[0]
    for wrong in (query, query[None, None, :]):
        with pytest.raises(DataError, match=r"field 'queries': queries must be a \(queries, 32\) matrix, got shape"):
            index.search(wrong, 3)
    assert index.search(query[None, :], 3)[1][0, 0] == 0


def test_search_of_an_empty_query_file_writes_no_hits_and_loads_no_model(tmp_path: Path, monkeypatch, capsys) -> None:
    """Zero queries at any --k: an empty hits file, exit 0, and no model loaded to embed nothing."""
    from vis_embed.model.runtime.embedder import Embedder

    def no_model(*_args, **_kwargs):
        raise AssertionError("the model was loaded for zero queries")

    monkeypatch.setattr(Embedder, "from_pretrained", no_model)
    write_index(_encoded(tmp_path), tmp_path / "idx", kind="flat")
    (tmp_path / "none.jsonl").write_text("\n  \n")
    assert main(["search", "--model", str(tmp_path / "model"), "--index", str(tmp_path / "idx"),
                 "--input", str(tmp_path / "none.jsonl"), "--k", str(10 ** 18), "--output",
                 str(tmp_path / "hits.jsonl"), "--no-progress"]) == 0
    assert (tmp_path / "hits.jsonl").read_text() == ""
    assert json.loads(capsys.readouterr().out)["queries"] == 0
