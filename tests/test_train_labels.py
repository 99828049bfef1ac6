"""Loss labels: identical candidates are never each other's negatives."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from vis_embed.data import load_train_config
from vis_embed.training.labels import loss_label


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
    labels = {rid: loss_label(cls, cls.get(rid)) for rid in ("p0", "p1", "p2", "p3", "p4")}
    assert labels["p0"] == labels["p1"]            # both candidates are the text "circle"
    assert len({labels["p0"], labels["p2"], labels["p3"], labels["p4"]}) == 4
    # identity rows keep their identity: two photos of person0 share it, person1 differs
    assert loss_label(people, people.get("i0")) == loss_label(people, people.get("i1"))
    assert loss_label(people, people.get("i0")) != loss_label(people, people.get("i2"))
    assert loss_label(people, people.get("i0")) == people.identity_key(people.get("i0"))
