"""eval/edit_winners.py reads each ID-Edit candidate's role right in both benchmark versions."""

from __future__ import annotations

from _eval_scripts import load_eval_script

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
edit_winners = load_eval_script("edit_winners")


def test_the_source_is_found_by_its_image_and_the_rest_by_order() -> None:
    query = {"image": "src.png", "text": "make the background green"}
    version_1 = {"query": query, "candidates": [{"image": "edit.png"}, {"image": "src.png"}, {"image": "wrong.png"},
                                                {"image": "twin.png"}, {"image": "other.png"}]}
    version_2 = {"query": query, "candidates": [{"image": "edit.png"}, {"image": "wrong.png"}, {"image": "twin.png"},
                                                {"image": "other.png"}, {"image": "other2.png"}]}
    assert edit_winners.candidate_roles(version_1) == ["edit (positive)", "unedited source", "contrary edit",
                                                       "look-alike's edit", "another object's edit"]
    assert edit_winners.candidate_roles(version_2) == ["edit (positive)", "contrary edit", "look-alike's edit",
                                                       "another object's edit", "another object's edit"]
