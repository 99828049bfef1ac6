"""Peer-protocol datasets derived from a synthetic benchmark (``vis-embed synth``), for
eval/objectives_comparison.sh.

The synthetic manifest scores every task by P@1 (its ``SynthNearID`` is a 2-candidate
``candidates`` set); the peer papers score with their own protocols.  This writes
``OUT/peer/benchmark.yaml`` and its rows, all from the synth's *evaluation* images (held-out
identities), deterministically:

* ``PeerNearID`` (``nearid``: SSR, pairwise accuracy) -- one row per SynthNearID query:
  views = [query, same object in another context], negatives = [its look-alike in the
  query's context, none];
* ``Peer2AFC`` (``2afc``, DreamSim/NIGHTS) -- reference = the query, A/B = the other view and
  the look-alike (swapped on every other row, label = 1 when A is the same object);
* ``PeerTLL`` (``asym_recall``, TLL: R@1/5/20) -- the first two images of each SynthRec
  identity as an aligned pair (a = image 1, b = image 2);
* ``PeerIDSimAP`` (``pair_ap``, ID-Sim's AP) -- for each SynthReID identity a same-identity
  pair (images 1, 2; label 1) and a pair with the next identity's first image (label 0).

ID-Sim's rank correlation (``human_corr``) needs human scores, which synthetic data has none
of; it is left out.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from vis_embed.io import atomic_write_text, write_jsonl

OBJECT_QUERY = "Find the same object as the one in the given image."
PERSON_QUERY = "Find the same person as the one in the given image."
CANDIDATE = "Represent the given image."


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _spec(synth: Path, name: str) -> dict[str, Any]:
    manifest = yaml.safe_load((synth / "benchmark.yaml").read_text(encoding="utf-8"))
    for entry in manifest["datasets"]:
        if entry["name"] == name:
            return entry
    raise SystemExit(f"{synth / 'benchmark.yaml'}: no dataset {name!r}")


def nearid_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(nearid rows, 2afc rows) from SynthNearID ``candidates`` rows (positive first, then the look-alike)."""
    nearid, two_afc = [], []
    for index, row in enumerate(rows):
        query, (positive, lookalike) = row["query"], row["candidates"][:2]
        nearid.append({"id": row["id"], "views": [query, positive], "negatives": [lookalike, None]})
        a, b = (positive, lookalike) if index % 2 == 0 else (lookalike, positive)
        two_afc.append({"id": row["id"], "reference": query, "a": a, "b": b, "label": 1.0 if index % 2 == 0 else 0.0})
    return nearid, two_afc


def _by_identity(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row["identity"]].append(row)
    return dict(sorted(grouped.items()))


def tll_rows(gallery: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": identity, "a": {"image": rows[0]["image"]}, "b": {"image": rows[1]["image"]}}
            for identity, rows in _by_identity(gallery).items() if len(rows) >= 2]


def pair_ap_rows(gallery: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups = [rows for rows in _by_identity(gallery).values() if len(rows) >= 2]
    out = []
    for index, rows in enumerate(groups):
        other = groups[(index + 1) % len(groups)][0]
        out.append({"id": f"{rows[0]['identity']}-same", "a": {"image": rows[0]["image"]},
                    "b": {"image": rows[1]["image"]}, "label": 1})
        out.append({"id": f"{rows[0]['identity']}-other", "a": {"image": rows[0]["image"]},
                    "b": {"image": other["image"]}, "label": 0})
    return out


def write_peer_benchmark(synth: Path, out: Path) -> Path:
    """Write ``out/benchmark.yaml`` + rows; image paths resolve against the synth's eval images."""
    nearid_spec, rec_spec, reid_spec = (_spec(synth, name) for name in ("SynthNearID", "SynthRec", "SynthReID"))
    nearid, two_afc = nearid_rows(_read_jsonl(synth / nearid_spec["path"]))
    files = {"nearid.jsonl": nearid, "2afc.jsonl": two_afc,
             "tll.jsonl": tll_rows(_read_jsonl(synth / rec_spec["gallery"])),
             "pair_ap.jsonl": pair_ap_rows(_read_jsonl(synth / reid_spec["gallery"]))}
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        write_jsonl(out / name, rows)
    images = str((synth / nearid_spec["image_root"]).resolve())
    common = {"benchmark": "other", "split": "IND", "image_root": images, "candidate_instruction": CANDIDATE}
    datasets = [
        {"name": "PeerNearID", "meta_task": "NearID-SSR", "layout": "nearid", "path": "nearid.jsonl",
         "query_instruction": OBJECT_QUERY, **common},
        {"name": "Peer2AFC", "meta_task": "2AFC", "layout": "2afc", "path": "2afc.jsonl",
         "query_instruction": OBJECT_QUERY, **common},
        {"name": "PeerTLL", "meta_task": "TLL", "layout": "asym_recall", "path": "tll.jsonl",
         "query_instruction": OBJECT_QUERY, **common},
        {"name": "PeerIDSimAP", "meta_task": "ID-Sim", "layout": "pair_ap", "path": "pair_ap.jsonl",
         "query_instruction": PERSON_QUERY, **common},
    ]
    manifest = out / "benchmark.yaml"
    atomic_write_text(manifest, "# Written by eval/objectives_peers.py from the synthetic benchmark's eval images.\n"
                      + yaml.safe_dump({"name": "synth-peers", "datasets": datasets}, sort_keys=False))
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("synth", type=Path, help="a `vis-embed synth` output folder")
    parser.add_argument("out", type=Path, help="folder for the peer manifest and rows")
    args = parser.parse_args()
    print(write_peer_benchmark(args.synth, args.out))


if __name__ == "__main__":
    main()
