"""The command-line paths bounded like the server: texts cut to the model's token budget before
tokenising (encode, search, index's inputs), and every bad file or flag one `error:` line, exit 2."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from vis_embed.cli import main
from vis_embed.gallery.store import write_index
from vis_embed.model.inputs.lengths import CHARS_PER_TOKEN, estimated_lengths, within_token_budget

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.timeout(120)]


def test_a_text_is_cut_to_its_token_budget_by_characters() -> None:
    assert within_token_budget("x" * 100, 10) == "x" * 100  # 160 characters fit 10 tokens
    assert within_token_budget("x" * 1000, 10) == "x" * (10 * CHARS_PER_TOKEN)
    assert within_token_budget("x" * 1000, None) == "x" * 1000 and within_token_budget(None, 10) is None


@pytest.fixture(scope="module")
def embedder(tiny_checkpoint):
    """The tiny checkpoint with a 128-token budget (its own is the decoder's whole context)."""
    from vis_embed.model.runtime.embedder import Embedder

    return Embedder.from_pretrained(tiny_checkpoint(), device="cpu", dtype="float32", max_length=128, workers=0)


def test_encoding_a_huge_text_never_tokenises_more_than_the_budget_holds(embedder, monkeypatch) -> None:
    tokenizer_type = type(embedder.model.processor.tokenizer)
    seen: list[int] = []
    original = tokenizer_type.__call__

    def spying(self, text=None, *args, **kwargs):
        texts = text if isinstance(text, list) else [text]
        seen.append(max(len(t) for t in texts if isinstance(t, str)))
        return original(self, text, *args, **kwargs)

    monkeypatch.setattr(tokenizer_type, "__call__", spying)
    limit = embedder.model.token_limit
    assert limit == 128
    huge = "word " * 400_000  # 2 MB: tokenised whole it cost 26 s and 730 MB
    estimated_lengths(embedder.model, [{"text": huge}], None)
    vectors = embedder.encode([{"text": huge}, {"text": "short"}], show_progress=False)
    assert vectors.shape[0] == 2 and np.isfinite(vectors).all()
    assert seen and max(seen) <= limit * CHARS_PER_TOKEN + 200  # the cut text plus the prompt template
    assert embedder.model.truncated_items >= 1


def _encoded(tmp_path: Path, fingerprint: str = "fp") -> Path:
    path = tmp_path / "e.npy"
    np.save(path, np.random.default_rng(0).standard_normal((30, 8)).astype(np.float32))
    path.with_suffix(".ids.json").write_text(json.dumps({"lines": list(range(1, 31)),
                                                         "model": {"name": "m", "fingerprint": fingerprint}}))
    return path


def _one_error_line(capsys, code: int) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("flags, match", [
    (["--memory", "1e300"], "--memory must be a positive number of GB"),
    (["--memory", "nan"], "--memory must be a positive number of GB"),
    (["--memory", "inf"], "--memory must be a positive number of GB"),
])
def test_index_flags_out_of_range_are_one_error_line(tmp_path, capsys, flags, match) -> None:
    line = _one_error_line(capsys, main(["index", "--embeddings", str(_encoded(tmp_path)), "--out",
                                         str(tmp_path / "idx"), *flags]))
    assert match in line


def test_a_bad_memory_is_refused_before_the_embeddings_are_read(tmp_path, capsys, monkeypatch) -> None:
    """The whole matrix was read and normalised before --memory was looked at (a large gallery's
    minutes, then a one-line refusal)."""
    from vis_embed.gallery import store

    monkeypatch.setattr(store, "read_embeddings", lambda *args: pytest.fail("read before --memory was checked"))
    line = _one_error_line(capsys, main(["index", "--embeddings", str(_encoded(tmp_path)), "--out",
                                         str(tmp_path / "idx"), "--memory", "-1"]))
    assert "--memory must be a positive number of GB" in line


@pytest.mark.parametrize("seed", ["1e23", "100000000000000000000000", "-1"])
def test_index_seed_out_of_range_is_a_usage_error(tmp_path, capsys, seed) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["index", "--embeddings", str(_encoded(tmp_path)), "--out", str(tmp_path / "idx"), "--kind", "ivf-pq",
              "--seed", seed])
    assert exit_.value.code == 2 and "error: argument --seed:" in capsys.readouterr().err


@pytest.mark.parametrize("damage, match", [
    (lambda e: (os.unlink(e), os.mkfifo(e)), "e.npy: embedding matrix path is a FIFO (named pipe)"),
    (lambda e: e.write_bytes(e.read_bytes()[:-100]), "e.npy: not a .npy matrix"),
    (lambda e: e.with_suffix(".ids.json").write_bytes(b"\xff{"), "e.ids.json:1: not UTF-8"),
    (lambda e: e.with_suffix(".ids.json").write_text("[" * 100_000), "e.ids.json: JSON nested too deeply"),
])
def test_a_bad_embeddings_file_is_one_error_line(tmp_path, capsys, damage, match) -> None:
    embeddings = _encoded(tmp_path)
    damage(embeddings)
    line = _one_error_line(capsys, main(["index", "--embeddings", str(embeddings), "--out", str(tmp_path / "idx")]))
    assert match in line


@pytest.mark.parametrize("damage, match", [
    (lambda d: (d / "index.faiss").write_bytes((d / "index.faiss").read_bytes()[:-3]), "index.faiss: its"),
    (lambda d: (d / "index.json").write_text(json.dumps({**json.loads((d / "index.json").read_text()), "dim": "abc"})),
     "index.json: field 'dim'"),
    (lambda d: (d / "index.json").write_text(json.dumps({**json.loads((d / "index.json").read_text()),
                                                         "rescore": "4"})), "index.json: field 'rescore'"),
    (lambda d: (d / "ids.json").write_bytes(b"\xff"), "ids.json: field 'ids': unreadable ids (not UTF-8"),
    (lambda d: ((d / "ids.json").unlink(), os.mkfifo(d / "ids.json")), "ids.json: is a FIFO (named pipe)"),
    (lambda d: (d / "index.json").write_text(json.dumps({**json.loads((d / "index.json").read_text()),
                                                         "model": None})),
     "index.json: field 'model': the index records no model fingerprint"),
])
def test_search_with_a_damaged_index_is_one_error_line_before_the_model_loads(tmp_path, capsys, damage,
                                                                              match) -> None:
    write_index(_encoded(tmp_path), tmp_path / "idx", kind="binary")
    damage(tmp_path / "idx")
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"text": "x"}\n')
    line = _one_error_line(capsys, main(["search", "--model", str(tmp_path / "no-model"), "--index",
                                         str(tmp_path / "idx"), "--input", str(queries), "--output",
                                         str(tmp_path / "hits.jsonl")]))
    assert match in line


def test_a_fifo_as_queries_is_not_a_regular_file(tmp_path, capsys) -> None:
    write_index(_encoded(tmp_path), tmp_path / "idx", kind="binary")
    os.mkfifo(tmp_path / "q.jsonl")
    line = _one_error_line(capsys, main(["search", "--model", str(tmp_path / "no-model"), "--index",
                                         str(tmp_path / "idx"), "--input", str(tmp_path / "q.jsonl"), "--output",
                                         str(tmp_path / "hits.jsonl")]))
    assert "q.jsonl: input path is a FIFO (named pipe), not a regular file" in line


def test_an_output_path_the_system_refuses_is_one_error_line(tmp_path, capsys) -> None:
    """An OSError no command turned into a DataError (report --json naming a folder: the rename
    onto it fails) is one error line naming the user's path, not a traceback."""
    (tmp_path / "out.json").mkdir()
    line = _one_error_line(capsys, main(["report", "--json", str(tmp_path / "out.json")]))
    assert line == f"error: {tmp_path / 'out.json'}: Is a directory"


def test_a_request_too_big_for_memory_is_one_error_line(tmp_path, capsys) -> None:
    """schedule --steps 1e14 allocated a steps-sized table up front: numpy's MemoryError traceback
    ('Unable to allocate 4.97 PiB'); it is one error line saying what failed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _training_fixtures import write_identity_dataset

    data = write_identity_dataset(tmp_path / "data", identities=8, images_per_identity=2, size=24)
    line = _one_error_line(capsys, main(["schedule", "--data", str(data), "--steps", "100000000000000",
                                         "--global-batch-size", "4", "--interleave-batch-size", "4",
                                         "--hard-negatives", "0", "--out", str(tmp_path / "s.parquet"),
                                         "--no-progress"]))
    assert line.startswith("error: out of memory: Unable to allocate") and not (tmp_path / "s.parquet").exists()


def test_a_reference_table_that_is_not_text_is_one_error_line(tmp_path, capsys) -> None:
    reference = tmp_path / "table.csv"
    reference.write_bytes(b"\x89PNG\r\n\x1a\n")
    line = _one_error_line(capsys, main(["report", "--reference", str(reference)]))
    assert f"{reference}:1: not UTF-8 text" in line


@pytest.mark.parametrize("command", ["encode", "mine-negatives"])
@pytest.mark.parametrize("batch_size", ["0", "-1"])
def test_a_batch_size_below_one_is_a_usage_error(tmp_path, capsys, command, batch_size) -> None:
    data = "--input" if command == "encode" else "--data"
    with pytest.raises(SystemExit) as exit_:
        main([command, "--model", str(tmp_path / "m"), data, str(tmp_path / "x.jsonl"), "--output" if command ==
              "encode" else "--out", str(tmp_path / "o"), "--batch-size", batch_size])
    assert exit_.value.code == 2
    assert f"error: argument --batch-size: must be >= 1, got {batch_size}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["synth", "quickstart"])
def test_a_negative_synth_seed_is_one_error_line(tmp_path, capsys, command) -> None:
    args = ["synth", "--size", "tiny", str(tmp_path / "out")] if command == "synth" else \
        ["quickstart", "--size", "tiny", "--out", str(tmp_path / "out"), "--quiet"]
    assert main([*args, "--seed", "-1"]) == 2
    err = capsys.readouterr().err  # quickstart names its stage first
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "error: --seed must be an integer >= 0, got -1"


def _interrupted_render_job(job):
    """A render job that gets the terminal's SIGINT first (fork: the worker knows this module)."""
    import signal

    from vis_embed.prep.synth import output

    os.kill(os.getpid(), signal.SIGINT)
    return output.render_job_for_tests(job)


def test_a_ctrl_c_reaches_synth_not_its_render_workers(tmp_path, monkeypatch) -> None:
    """A render worker that took the terminal's SIGINT died with a KeyboardInterrupt traceback
    (and its task was lost: the pool waited for it); workers leave Ctrl-C to the parent."""
    from vis_embed.prep.synth import generate, output

    monkeypatch.setattr(output, "render_job_for_tests", output._render_job, raising=False)
    monkeypatch.setattr(output, "_render_job", _interrupted_render_job)
    out = generate(tmp_path / "synth", size="tiny", workers=2)  # workers only: the patch runs in them
    assert (out / "synth.json").is_file()


@pytest.mark.parametrize("text, shown", [("", "an empty file"), ("- a\n", "a list"), ("hello\n", "a string")])
def test_a_yaml_file_that_is_no_mapping_is_named_so(tmp_path, capsys, text, shown) -> None:
    """Pydantic's words named the package's own class: 'Input should be a valid dictionary or
    instance of TrainDataDocument (got None)' for an empty data config."""
    path = tmp_path / "data.yaml"
    path.write_text(text)
    line = _one_error_line(capsys, main(["prep", "check", str(path)]))
    assert line == f"error: {path}: expected a YAML mapping (keys such as 'datasets:'), got {shown}"


def test_a_tiny_model_seed_past_torchs_range_is_one_error_line(tmp_path, capsys) -> None:
    line = _one_error_line(capsys, main(["tiny-model", str(tmp_path / "m"), "--seed", str(10**23)]))
    assert line.startswith("error: --seed must be an integer from -9223372036854775808 to 18446744073709551615")
    assert not (tmp_path / "m").exists()
