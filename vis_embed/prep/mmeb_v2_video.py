"""MMEB-V2's 18 video tasks -> vis_embed rows (the annotation sets of ``VLM2Vec/*`` + frame folders).

Each converter reads the task's annotation rows and returns a :class:`Planned`: the files to
write, the frame folders it needs (``wanted``: extracted into ``media/`` afterwards, in one pass
over the archive for every task that shares it) and, where rows depend on the extracted folders
(moment retrieval), a ``finish`` step that builds them from ``media/``:

* global tasks (retrieval, classification but SmthSmthV2) -> the ``qrels`` layout:
  ``queries.jsonl`` / ``corpus.jsonl`` / ``qrels.jsonl``; the corpus is the task's deduplicated
  pool (every clip; every class label seen), in order of first appearance;
* local tasks (QA, SmthSmthV2, moment retrieval) -> ``<task>.jsonl`` rows
  ``{"id", "query", "candidates"}`` with the positive first.

Items hold the data only (caption, question with its options, label, clip); the task
instructions belong to the benchmark manifest, not to the rows.  A clip is
``{"video": "media/<clip folder>"}``, relative to the task folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vis_embed.prep.mmeb_v2_sources import TaskSpec
from vis_embed.errors import DataError

Rows = list[dict[str, Any]]
Files = dict[str, Rows]
LETTERS = "ABCDEFGHIJ"


@dataclass
class Planned:
    """A converted task before its media are extracted."""

    files: Files
    wanted: set[str] = field(default_factory=set)  # entries of the task's archive folder to extract
    finish: Callable[[Path], Files] | None = None  # more files, built from the extracted media/ folder
    report: dict[str, Any] = field(default_factory=dict)  # counts for the manifest


def video_item(clip: str) -> dict[str, str]:
    return {"video": f"media/{clip}"}


def column_value(row: dict[str, Any], rule: str, where: str, line: int) -> Any:
    """A column value; ``first:COL`` takes a list's first entry, ``stem:COL`` a path's stem."""
    how, _, column = rule.rpartition(":")
    if column not in row:
        raise DataError(f"missing column {column!r} (has: {', '.join(sorted(row))})", path=where, line=line,
                        field=column)
    if row[column] is None:
        raise DataError("no value", path=where, line=line, field=column)
    value = row[column]
    if isinstance(value, dict) and isinstance(value.get("path"), str):
        value = value["path"]  # an undecoded datasets.Video / Image value names its file
    if how == "first":
        if not isinstance(value, list) or not value:
            raise DataError("expected a non-empty list", path=where, line=line, field=column)
        value = value[0]
    if how == "stem":
        value = Path(str(value)).stem
    return value


def clip_name(value: Any, where: str, line: int, column: str) -> str:
    """A clip folder below the archive prefix: relative, no ``..`` (it becomes a path under media/)."""
    text = str(value).strip().strip("/")
    if not text or any(part in ("", ".", "..") for part in text.split("/")) or "\\" in text:
        raise DataError(f"unusable clip name {value!r}", path=where, line=line, field=column)
    return text


def _rows(table: Iterable[dict[str, Any]]) -> Iterable[tuple[int, dict[str, Any]]]:
    return enumerate(table, start=1)  # "line" = the row's 1-based position in the split


def _qrels_files(queries: Rows, corpus: dict[str, dict[str, Any]], pairs: list[tuple[str, str]]) -> Files:
    return {"queries.jsonl": queries, "corpus.jsonl": list(corpus.values()),
            "qrels.jsonl": [{"query_id": q, "corpus_id": c, "score": 1} for q, c in pairs]}


def video_retrieval(spec: TaskSpec, table: Iterable[dict[str, Any]], where: str) -> Planned:
    """Caption -> clip, over every clip of the task."""
    queries: Rows = []
    corpus: dict[str, dict[str, Any]] = {}
    pairs: list[tuple[str, str]] = []
    for line, row in _rows(table):
        rule = spec.columns["video_id"]
        clip = clip_name(column_value(row, rule, where, line), where, line, rule)
        text = str(column_value(row, spec.columns["text"], where, line))
        query_id = str(line - 1)
        queries.append({"id": query_id, "text": text})
        corpus.setdefault(clip, {"id": clip, **video_item(clip)})
        pairs.append((query_id, clip))
    return Planned(_qrels_files(queries, corpus, pairs), set(corpus))


def video_classification(spec: TaskSpec, table: Iterable[dict[str, Any]], where: str) -> Planned:
    """Clip -> its class label, over every label of the task (those its rows name)."""
    queries: Rows = []
    labels: dict[str, dict[str, Any]] = {}
    pairs: list[tuple[str, str]] = []
    for line, row in _rows(table):
        clip = clip_name(column_value(row, "video_id", where, line), where, line, "video_id")
        label = str(column_value(row, "pos_text", where, line))
        queries.append({"id": str(line - 1), **video_item(clip)})
        labels.setdefault(label, {"id": label, "text": label})
        pairs.append((str(line - 1), label))
    return Planned(_qrels_files(queries, labels, pairs), {q["video"].removeprefix("media/") for q in queries},
                   report={"label_pool": "the labels the task's rows name", "labels": len(labels)})


def _positive_first(positive: str, options: list[str]) -> Rows:
    return [{"text": positive}, *({"text": o} for o in options if o != positive)]


def ssv2(spec: TaskSpec, table: Iterable[dict[str, Any]], where: str) -> Planned:
    """SmthSmthV2: clip -> its label among the row's own candidate labels (``neg_text``)."""
    rows: Rows = []
    for line, row in _rows(table):
        clip = clip_name(column_value(row, "video_id", where, line), where, line, "video_id")
        positive, options = str(column_value(row, "pos_text", where, line)), column_value(row, "neg_text", where, line)
        if not isinstance(options, list):
            raise DataError("expected a list of labels", path=where, line=line, field="neg_text")
        rows.append({"id": str(line - 1), "query": video_item(clip),
                     "candidates": _positive_first(positive, [str(o) for o in options])})
    return Planned({f"{spec.name}.jsonl": rows}, {r["query"]["video"].removeprefix("media/") for r in rows})


# ------------------------------------------------------------------ question answering

def _lettered(question: str, options: list[str]) -> tuple[str, list[str]]:
    """``question`` followed by ``Options:`` and ``(A) ...`` lines; the lettered options."""
    lettered = [f"({LETTERS[k]}) {o}" for k, o in enumerate(options)]
    return "\n".join([question, "Options:", *lettered]), lettered


def _strip_letter(option: str) -> str:
    """``"A. text"`` -> ``"text"`` (Video-MME and EgoSchema options carry their letter)."""
    head, sep, rest = option.partition(". ")
    return rest.strip() if sep and len(head) <= 2 else option.strip()


def _answer_index(answer: Any, count: int, where: str, line: int, column: str) -> int:
    text = str(answer).strip()
    index = LETTERS.index(text) if len(text) == 1 and text in LETTERS else int(text) if text.isdigit() else -1
    if not 0 <= index < count:
        raise DataError(f"answer {answer!r} names none of the {count} options", path=where, line=line, field=column)
    return index


def _qa_row(name: str, row: dict[str, Any], where: str, line: int) -> tuple[str, str, list[str], int]:
    """(clip, question text with its options, candidate texts, index of the answer) per task."""
    def get(column: str) -> Any:
        return column_value(row, column, where, line)

    if name == "Video-MME":
        options = [str(o) for o in get("options")]
        text = str(get("question")) + "\n" + "\n".join(options)
        return str(get("videoID")), text, [_strip_letter(o) for o in options], _answer_index(
            get("answer"), len(options), where, line, "answer")
    if name == "EgoSchema":
        options = [str(o) for o in get("option")]
        text = str(get("question")) + " ".join(options)  # no separator: as the reference writes it
        return str(get("video_idx")), text, [_strip_letter(o) for o in options], _answer_index(
            get("answer"), len(options), where, line, "answer")
    if name == "NExTQA":  # the question lists lettered options; the candidates are the bare answers
        options = [str(get(f"a{k}")) for k in range(5)]
        text, _ = _lettered(str(get("question")), options)
        return str(get("video")), text, options, _answer_index(get("answer"), 5, where, line, "answer")
    if name == "MVBench":
        raw = [str(o) for o in get("candidates")]
        if get("answer") not in raw:
            raise DataError("answer is not among the candidates", path=where, line=line, field="answer")
        text, options = _lettered(str(get("question")), raw)
        return f"{get('subset')}/{get('video')}", text, options, raw.index(get("answer"))
    if name == "ActivityNetQA":
        answer = str(get("answer"))
        if answer not in ("yes", "no"):
            raise DataError(f"answer {answer!r} is not yes/no", path=where, line=line, field="answer")
        options = ["yes", "no"]
        return f"v_{get('video_name')}", str(get("question")) + "? (A) yes; (B) no.", options, options.index(answer)
    raise DataError(f"no question-answering converter for task {name!r}", path=where)


def video_qa(spec: TaskSpec, table: Iterable[dict[str, Any]], where: str) -> Planned:
    """Clip + question -> the right option among the question's own options."""
    rows: Rows = []
    for line, row in _rows(table):
        clip, text, options, answer = _qa_row(spec.name, row, where, line)
        clip = clip_name(clip, where, line, "video")
        rows.append({"id": str(line - 1), "query": {"text": text, **video_item(clip)},
                     "candidates": _positive_first(options[answer], options)})
    return Planned({f"{spec.name}.jsonl": rows}, {r["query"]["video"].removeprefix("media/") for r in rows})


# ------------------------------------------------------------------ moment retrieval

def _clip_candidates(folder: Path, clip: str, where: str, line: int) -> tuple[Rows, int]:
    """The clip folders beside ``query``, positives first; and how many positives."""
    names = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "query")
    positives = [n for n in names if n.startswith("positive")]
    if not positives:
        raise DataError(f"clip folder {clip!r} has no positive* sub-folder", path=where, line=line)
    ordered = positives + [n for n in names if n not in positives]
    return [video_item(f"{clip}/{n}") for n in ordered], len(positives)


def _with_positives(row: dict[str, Any], count: int) -> dict[str, Any]:
    # several right clips: the first `positives` candidates all count as hits (MomentSeeker)
    return {**row, "positives": count} if count > 1 else row


def moments(spec: TaskSpec, table: Iterable[dict[str, Any]], where: str) -> Planned:
    """QVHighlight / Charades-STA: text + the whole video -> the right clip among the video's own."""
    pending: list[tuple[int, str, str]] = []
    for line, row in _rows(table):
        clip = clip_name(column_value(row, "stem:video_path", where, line), where, line, "video_path")
        pending.append((line, str(column_value(row, "query", where, line)), clip))

    def finish(media: Path) -> Files:
        rows: Rows = []
        for line, text, clip in pending:
            if not (media / clip / "query").is_dir():
                raise DataError(f"clip folder {clip!r} has no query sub-folder", path=where, line=line)
            candidates, count = _clip_candidates(media / clip, clip, where, line)
            rows.append(_with_positives({"id": str(line - 1), "query": {"text": text, **video_item(f"{clip}/query")},
                                         "candidates": candidates}, count))
        return {f"{spec.name}.jsonl": rows}
    return Planned({}, {clip for _, _, clip in pending}, finish)


def _seeker_clip(entry: Any, where: str, line: int, column: str) -> str:
    path = entry.get("output_path") if isinstance(entry, dict) else None
    if not isinstance(path, str):
        raise DataError("expected {'output_path': ...} entries", path=where, line=line, field=column)
    return "video_frames/" + clip_name(path.replace("/", "_").split(".mp4")[0], where, line, column)


def momentseeker(spec: TaskSpec, table: Iterable[dict[str, Any]], where: str) -> Planned:
    """MomentSeeker: text (+ an image or a video segment) -> the right clip(s) among the row's own."""
    rows: Rows = []
    wanted: set[str] = set()
    for line, row in _rows(table):
        query: dict[str, Any] = {"text": str(column_value(row, "query", where, line))}
        given = str(row.get("input_frames") or "")
        if given.endswith(".mp4"):
            query.update(video_item(_seeker_clip({"output_path": given}, where, line, "input_frames")))
        elif given.endswith(".jpg"):
            query["image"] = "media/" + clip_name(f"query_{given}", where, line, "input_frames")
        positives, negatives = ([_seeker_clip(e, where, line, column) for e in column_value(row, column, where, line)]
                                for column in ("positive_frames", "negative_frames"))
        if not positives:
            raise DataError("no positive clip", path=where, line=line, field="positive_frames")
        wanted.update(positives, negatives, [v.removeprefix("media/") for k, v in query.items() if k != "text"])
        rows.append(_with_positives({"id": str(line - 1), "query": query,
                                     "candidates": [video_item(c) for c in positives + negatives]}, len(positives)))
    return Planned({f"{spec.name}.jsonl": rows}, wanted)


CONVERTERS: dict[str, Callable[[TaskSpec, Iterable[dict[str, Any]], str], Planned]] = {
    "video-ret": video_retrieval, "video-cls": video_classification, "ssv2": ssv2, "video-qa": video_qa,
    "moments": moments, "momentseeker": momentseeker,
}
