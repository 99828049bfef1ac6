"""Hard-negative mining: exact neighbours with injected embeddings, denoising, and the CLI on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vis_embed.mining.hard_negatives import load_mining_dataset, mine_dataset, mine_from_embeddings


def _unit(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _angles(degrees: list[float]) -> np.ndarray:
    radians = np.radians(degrees)
    return _unit(np.stack([np.cos(radians), np.sin(radians)], axis=1).tolist())


def test_nearest_records_of_the_same_group_but_another_identity_nearest_first() -> None:
    # candidates on a circle; queries equal to their own candidate
    candidates = _angles([0, 10, 22, 30, 40, 200, 210])
    identities = ["a", "a", "b", "c", "d", "e", "f"]
    groups = ["g1", "g1", "g1", "g1", "g1", "g2", "g2"]
    result = mine_from_embeddings(candidates, candidates, identities, groups, k=2)
    assert result.hard_negatives[0] == [2, 3]   # row 1 shares identity "a": excluded
    assert result.hard_negatives[2] == [3, 1]   # 8° and 12° away
    assert result.hard_negatives[4] == [3, 2]
    assert result.hard_negatives[5] == [6]      # group g2 has one other record only
    assert result.report["records_with_k"] == 5 and result.report["records_with_fewer"] == 2


def test_default_ranks_by_candidate_similarity_query_option_by_query() -> None:
    # record 0's query points at 90 deg, its candidate (generated image) at 0 deg: the records
    # whose candidates are closest to its candidate (10, 20 deg) differ from those closest to
    # its query (80, 70 deg)
    queries = _angles([90, 10, 20, 70, 80])
    candidates = _angles([0, 10, 20, 70, 80])
    identities = ["a", "b", "c", "d", "e"]
    by_candidate = mine_from_embeddings(queries, candidates, identities, None, k=2)
    assert by_candidate.hard_negatives[0] == [1, 2]
    assert by_candidate.report["similarity"] == "candidate"
    # the report's mean similarity is in the ranking's own terms (candidate . candidate)
    pairs = [(i, j) for i, found in enumerate(by_candidate.hard_negatives) for j in found]
    assert by_candidate.report["mean_negative_similarity"] == pytest.approx(
        np.mean([candidates[i] @ candidates[j] for i, j in pairs]), abs=1e-6)
    by_query = mine_from_embeddings(queries, candidates, identities, None, k=2, similarity="query")
    assert by_query.hard_negatives[0] == [4, 3]
    assert by_query.report["similarity"] == "query"
    from vis_embed.errors import ConfigError

    with pytest.raises(ConfigError, match="similarity must be one of"):
        mine_from_embeddings(queries, candidates, identities, None, k=2, similarity="images")


def test_records_without_group_key_get_and_give_no_negatives() -> None:
    candidates = _angles([0, 5, 10, 15])
    result = mine_from_embeddings(candidates, candidates, [None] * 4, ["x", None, "x", "x"], k=3)
    assert result.hard_negatives[1] == []
    assert 1 not in sum(result.hard_negatives, [])
    assert result.hard_negatives[0] == [2, 3]
    assert result.report["records_without_group"] == 1


def test_noisy_positives_are_flagged_or_removed() -> None:
    queries = _angles([0, 90, 0, 45])
    candidates = _angles([0, 0, 10, 45])   # row 1: its positive is 90° away from its query
    flagged = mine_from_embeddings(queries, candidates, [None] * 4, None, k=2, min_positive_similarity=0.5)
    assert flagged.noisy.tolist() == [False, True, False, False]
    assert not flagged.removed.any()
    assert flagged.positive_similarity[1] == pytest.approx(0.0, abs=1e-6)
    removed = mine_from_embeddings(queries, candidates, [None] * 4, None, k=2, min_positive_similarity=0.5,
                                   remove_noisy=True)
    assert removed.removed.tolist() == [False, True, False, False]
    assert all(1 not in hn for hn in removed.hard_negatives) and removed.hard_negatives[1] == []


def test_identity_positive_similarity_uses_the_other_instances_and_removal_cascades() -> None:
    queries = _angles([0, 0, 90, 90, 90])
    candidates = _angles([0, 0, 90, 90, 0])
    identities = ["p", "p", "p", "q", "q"]
    result = mine_from_embeddings(queries, candidates, identities, None, k=1, kind="identity",
                                  min_positive_similarity=0.4, remove_noisy=True)
    # row 0: others are 0° and 90° -> mean cos 0.5; row 3: other (row 4) at 0° vs query 90° -> 0
    assert result.positive_similarity[0] == pytest.approx(0.5, abs=1e-6)
    assert result.positive_similarity[3] == pytest.approx(0.0, abs=1e-6)
    assert result.noisy.tolist() == [False, False, True, True, False]
    # q keeps one instance (row 4) only: it cannot be an anchor's positive, so it goes too
    assert result.removed.tolist() == [False, False, True, True, True]


class _TextEncoder:
    """A fake encoder: the vector of an item is looked up from its text (exact expectations)."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.calls: list[str | None] = []

    def encode(self, items, instruction=None, batch_size=16, show_progress=False):
        self.calls.append(instruction)
        return np.stack([self.vectors[item["text"]] for item in items]).astype(np.float32)


def _pairs_config(root: Path) -> Path:
    rows = [{"id": f"r{i}", "query": {"text": f"q{i}"}, "positive": {"text": f"p{i}"},
             "edit": "red" if i < 4 else "blue", "identity": f"obj{i // 2}"} for i in range(8)]
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "train.yaml").write_text(
        "datasets:\n  - name: edits\n    kind: pairs\n    path: pairs.jsonl\n"
        "    query_instruction: 'Edit it.'\n    candidate_instruction: 'Represent it.'\n")
    return root / "train.yaml"


def test_mine_dataset_with_an_injected_encoder_writes_ids_and_uses_instructions(tmp_path: Path) -> None:
    from vis_embed.data import load_train_config
    from vis_embed.data.tables import write_table

    config_path = _pairs_config(tmp_path)
    angles = {f"q{i}": i * 10.0 for i in range(8)} | {f"p{i}": i * 10.0 + 1 for i in range(8)}
    encoder = _TextEncoder({text: _angles([a])[0] for text, a in angles.items()})
    dataset = load_mining_dataset(config_path)
    rows, result = mine_dataset(dataset, encoder, k=2, group_by="edit")
    assert encoder.calls == ["Edit it.", "Represent it."]
    by_id = {row["id"]: row for row in rows}
    # r0 (obj0, red): r1 is obj0 too -> nearest others in group red are r2, r3
    assert by_id["r0"]["hard_negatives"] == ["r2", "r3"]
    assert by_id["r5"]["hard_negatives"] == ["r6", "r7"]  # group blue; r4 shares obj2
    assert all(set(by_id[n]["edit"] for n in row["hard_negatives"]) == {row["edit"]} for row in rows)
    write_table(tmp_path / "mined.jsonl", rows)
    (tmp_path / "mined.yaml").write_text("datasets:\n  - {name: edits, kind: pairs, path: mined.jsonl}\n")
    reloaded = load_train_config(tmp_path / "mined.yaml").datasets[0]
    assert reloaded.get("r0")["hard_negatives"] == ["r2", "r3"]


def test_a_group_by_field_no_record_has_is_an_error_before_encoding(tmp_path: Path) -> None:
    from vis_embed.errors import ConfigError

    encoder = _TextEncoder({})
    dataset = load_mining_dataset(_pairs_config(tmp_path))
    with pytest.raises(ConfigError, match="--group-by 'edti': no record .* has this field"):
        mine_dataset(dataset, encoder, k=2, group_by="edti")  # misspelled: would mine nothing, exit 0
    assert encoder.calls == []
    del dataset.records[0]["edit"]  # some records without it are fine: counted
    _rows, result = mine_dataset(dataset, _TextEncoder({f"{s}{i}": _angles([i * 10.0])[0] for s in "qp"
                                                        for i in range(8)}), k=2, group_by="edit")
    assert result.report["records_without_group"] == 1


@pytest.mark.parametrize("settings, message", [
    ({"k": 0}, "k must be >= 1, got 0"),
    ({"min_positive_similarity": 20.0}, "min_positive_similarity must be a cosine from -1 to 1, got 20.0"),
    ({"min_positive_similarity": -1.5}, "min_positive_similarity must be a cosine from -1 to 1"),
    ({"min_positive_similarity": float("nan")}, "min_positive_similarity must be a cosine from -1 to 1, got nan"),
    ({"similarity": "images"}, "similarity must be one of"),
])
def test_a_bad_mining_setting_is_an_error_before_encoding(settings, message, tmp_path: Path) -> None:
    # k was checked only after both sides were encoded; a threshold outside the cosine range
    # flagged every record or none (20 with remove_noisy: the whole dataset dropped, exit 0)
    from vis_embed.errors import ConfigError

    encoder = _TextEncoder({})
    dataset = load_mining_dataset(_pairs_config(tmp_path))
    with pytest.raises(ConfigError, match=message):
        mine_dataset(dataset, encoder, **{"k": 2, "remove_noisy": True, **settings})
    assert encoder.calls == []
    with pytest.raises(ConfigError, match=message):
        mine_from_embeddings(_angles([0, 10]), _angles([0, 10]), None, None, **{"k": 2, **settings})


@pytest.mark.parametrize("flag, value", [("--min-positive-similarity", "20"), ("--min-positive-similarity", "-1.5"),
                                         ("--min-positive-similarity", "1.0001"), ("--k", "0"), ("--k", "-3")])
def test_cli_refuses_a_bad_k_or_threshold_naming_the_flag_before_the_model_loads(
        flag, value, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from vis_embed.cli import main
    from vis_embed.model.runtime.embedder import Embedder

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Embedder, "from_pretrained", no_model)
    with pytest.raises(SystemExit) as exited:
        main(["mine-negatives", "--model", "tiny", "--data", str(_pairs_config(tmp_path)), "--out",
              str(tmp_path / "mined.jsonl"), f"{flag}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err and "Traceback" not in err
    assert not (tmp_path / "mined.jsonl").exists()


def test_cli_mines_with_a_tiny_checkpoint(tmp_path: Path, tiny_checkpoint, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    from vis_embed.cli import main
    from vis_embed.data import load_train_config

    config_path = _pairs_config(tmp_path)
    out = tmp_path / "mined.jsonl"
    code = main(["mine-negatives", "--model", str(tiny_checkpoint()), "--data", str(config_path),
                 "--group-by", "edit", "--k", "2", "--out", str(out), "--min-positive-similarity", "-1",
                 "--similarity", "query"])
    assert code == 0
    assert "0 records without 'edit'" in capsys.readouterr().out
    (tmp_path / "mined.yaml").write_text("datasets:\n  - {name: edits, kind: pairs, path: mined.jsonl}\n")
    dataset = load_train_config(tmp_path / "mined.yaml").datasets[0]
    for rec in dataset.records:
        assert len(rec["hard_negatives"]) == 2
        for negative in rec["hard_negatives"]:
            other = dataset.get(negative)
            assert other["edit"] == rec["edit"] and other["identity"] != rec["identity"]
    report = json.loads((tmp_path / "mined.jsonl.mining.json").read_text())
    assert report["records_with_k"] == 8 and report["positive_similarity"]["below_threshold"] == 0
    assert report["similarity"] == "query"


def test_search_depth_follows_k_not_the_largest_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    import vis_embed.gallery.search as gallery_search
    from vis_embed.vectors.index_spec import IndexSpec

    rng = np.random.default_rng(0)
    n, k = 600, 5
    vectors = rng.normal(size=(n, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[1] = vectors[0]  # a tie: the result must not depend on how deep the search went
    identity = np.where(np.arange(n) < 550, 0, np.arange(n))  # one identity of 550 rows, 50 singletons
    _, full = gallery_search.search(gallery_search.build_index(vectors, IndexSpec(kind="flat")), vectors, n)
    other = [[int(j) for j in hits if identity[j] != identity[i]] for i, hits in enumerate(full)]
    # depth a row needs: the position of its k-th neighbour of another identity
    needed = [1 + int(np.flatnonzero(identity[hits] != identity[i])[k - 1]) for i, hits in enumerate(full)]
    calls: list[tuple[int, int]] = []
    real_search = gallery_search.search

    def counting_search(index, queries, depth):
        calls.append((len(queries), depth))
        return real_search(index, queries, depth)

    monkeypatch.setattr(gallery_search, "search", counting_search)
    result = mine_from_embeddings(vectors, vectors, identity, None, k)
    # the same negatives as one search deep enough for everyone
    assert result.hard_negatives == [hits[:k] for hits in other]
    # work (and memory) follows what each row needs: k + a margin for all, deeper (doubling, so
    # less than 4x its need) only for the rows crowded by their own identity -- not N x (k + 550)
    work = sum(rows * depth for rows, depth in calls)
    assert work <= n * (k + 16) + 4 * sum(needed) < n * (k + 550)
