"""Loss labels: encoded once at data load, identical candidates share a code (never each
other's negatives), distinct crops never do, and the schedule's ``label`` column carries them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from vis_embed.data import load_train_config


def _write(tmp_path: Path) -> Path:
    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8), (10, 20, 30)).save(tmp_path / name)
    pairs = [
        {"id": "p0", "query": {"image": "a.png"}, "positive": {"text": "circle"}},
        {"id": "p1", "query": {"image": "b.png"}, "positive": {"text": "circle"}},
        {"id": "p2", "query": {"image": "a.png"}, "positive": {"text": "square"}},
        {"id": "p3", "query": {"text": "red"}, "positive": {"image": "a.png"}},
        {"id": "p4", "query": {"text": "blue"}, "positive": {"image": "b.png"}},
    ]
    people = [{"id": f"i{n}", "image": "a.png" if n % 2 else "b.png", "identity": f"person{n // 2}"}
              for n in range(4)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    (tmp_path / "people.jsonl").write_text("".join(json.dumps(r) + "\n" for r in people))
    (tmp_path / "train.yaml").write_text(
        "datasets:\n"
        "  - {name: cls, kind: pairs, path: pairs.jsonl}\n"
        "  - {name: people, kind: identity, path: people.jsonl}\n")
    return tmp_path / "train.yaml"


def test_pairs_rows_with_the_same_candidate_share_a_label(tmp_path: Path) -> None:
    config = load_train_config(_write(tmp_path))
    cls, people = config.dataset("cls"), config.dataset("people")
    labels = {rid: int(cls.labels[cls.index[rid]]) for rid in ("p0", "p1", "p2", "p3", "p4")}
    assert labels["p0"] == labels["p1"]            # both candidates are the text "circle"
    assert len({labels["p0"], labels["p2"], labels["p3"], labels["p4"]}) == 4
    # identity rows keep their identity: two photos of person0 share it, person1 differs
    person = {rid: int(people.labels[people.index[rid]]) for rid in ("i0", "i1", "i2", "i3")}
    assert person["i0"] == person["i1"] != person["i2"] == person["i3"]
    # one code space across datasets: no identity code equals a candidate code
    assert not set(person.values()) & set(labels.values())
    assert cls.labels.dtype == people.labels.dtype == np.int64


def test_label_codes_follow_identity_codes_of_the_scheduler_input(tmp_path: Path) -> None:
    """Identity rows: the loss label code and the scheduler's identity code group rows alike."""
    from vis_embed.sampling.build import subdatasets_from_config

    config = load_train_config(_write(tmp_path))
    people = config.dataset("people")
    sub = {d.name: d for d in subdatasets_from_config(config)}["people"]
    pairs = list(zip(people.labels.tolist(), np.asarray(sub.identities).tolist()))
    assert len(set(pairs)) == len({code for code, _ in pairs}) == len({code for _, code in pairs})


def test_crop_labels_key_on_path_box_and_text(tmp_path: Path) -> None:
    rows = [{"id": "r0", "query": {"text": "q"}, "positive": {"image": "big.png", "bbox": [0, 0, 8, 8]}},
            {"id": "r1", "query": {"text": "q"}, "positive": {"image": "./big.png", "bbox": [0, 0, 8, 8]}},
            {"id": "r2", "query": {"text": "q"}, "positive": {"image": "big.png", "bbox": [0, 0, 8, 7]}},
            {"id": "r3", "query": {"text": "q"}, "positive": {"image": "big.png", "bbox": [0, 0, 8, 8], "text": "t"}},
            {"id": "r4", "query": {"text": "q"}, "positive": {"image": "big.png"}}]
    Image.new("RGB", (8, 8)).save(tmp_path / "big.png")
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "train.yaml").write_text("datasets:\n  - {name: crops, kind: pairs, path: pairs.jsonl}\n")
    labels = load_train_config(tmp_path / "train.yaml").dataset("crops").labels.tolist()
    assert labels[0] == labels[1]  # the same resolved file and box
    assert len(set(labels[1:])) == 4


def _write_crop_pairs(root: Path, with_identity: bool) -> Path:
    """64 pairs rows: a text query and, as positive, a distinct 16x16 crop of one noise image."""
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(0).integers(0, 256, size=(128, 128, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / "big.png")
    rows = []
    for n in range(64):
        x, y = 16 * (n % 8), 16 * (n // 8)
        row = {"id": f"r{n}", "query": {"text": f"patch {n}"},
               "positive": {"image": "big.png", "bbox": [x, y, x + 16, y + 16]}}
        if with_identity:
            row["identity"] = f"patch{n}"
        rows.append(row)
    (root / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "train.yaml").write_text(
        "datasets:\n  - {name: crops, kind: pairs, path: pairs.jsonl,"
        " query_instruction: Find the patch., candidate_instruction: Represent the patch.}\n")
    return root / "train.yaml"


def _first_step_loss(base: Path, data: Path, run: Path) -> float:
    import sys

    from vis_embed.training.recipe import load_recipe
    from vis_embed.training.trainer import Trainer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _training_fixtures import tiny_recipe, write_schedule

    schedule = write_schedule(data, run.parent / f"{run.name}.parquet", steps=1, batch=64)
    recipe = load_recipe(raw=tiny_recipe(base, data, schedule, run, max_steps=1, global_batch_size=64,
                                         temperature__learnable=False))
    Trainer(recipe).train()
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    return float(log[0]["loss"])


def test_distinct_crop_positives_without_identity_give_the_loss_of_distinct_identities(
        tiny_checkpoint, tmp_path: Path, one_torch_thread) -> None:
    """Regression (issue 25): labels of bbox-crop positives came from ``id()`` of a temporary
    PIL image; addresses are reused, so distinct crops shared labels and left each other's
    denominators.  Distinct crops are distinct candidates: same loss as one identity per row."""
    base = tiny_checkpoint("qwen2-vl")
    without = _first_step_loss(base, _write_crop_pairs(tmp_path / "plain", False), tmp_path / "run_plain")
    with_identity = _first_step_loss(base, _write_crop_pairs(tmp_path / "ident", True), tmp_path / "run_ident")
    assert abs(without - with_identity) <= 1e-4, (without, with_identity)
