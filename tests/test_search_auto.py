"""``--index auto``: which exact search runs on which hardware, and that results.json says so.

The hardware is simulated: feature detection and the calibration are monkeypatched, so each
branch of the decision is tested on any machine.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from vis_embed.gallery import index_choice, search, search_bf16
from vis_embed.vectors.index_spec import IndexSpec


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """``machine(gpu=..., flags=..., bf16_faster=...)`` simulates the hardware ``choose_index`` sees."""
    calibrations: list[int] = []

    def simulate(gpu: bool = False, flags: tuple[str, ...] = (), bf16_faster: bool = True) -> list[int]:
        index_choice.choose_index.cache_clear()
        monkeypatch.setattr(index_choice, "gpu_available", lambda: gpu)
        monkeypatch.setattr(index_choice, "cpu_flags", lambda: set(flags))
        monkeypatch.setattr(index_choice, "bf16_faster_than_faiss",
                            lambda dim: calibrations.append(dim) or bf16_faster)
        return calibrations

    yield simulate
    index_choice.choose_index.cache_clear()


@pytest.mark.parametrize("gpu,flags,bf16_faster,expected,calibrated", [
    (True, ("amx_bf16", "avx512_bf16"), True, "exact-gpu", False),   # a GPU wins over any CPU path
    (False, ("avx2", "amx_bf16", "avx512_bf16"), False, "exact-bf16", False),  # AMX: no calibration needed
    (False, ("avx2", "avx512_bf16"), True, "exact-bf16", True),       # avx512_bf16 only: calibrated...
    (False, ("avx2", "avx512_bf16"), False, "exact", True),           # ...and faiss where it is faster
    (False, ("avx2", "fma"), True, "exact", False),                   # no native bf16: faiss, no calibration
    (False, (), True, "exact", False),                                # flags unreadable
])
def test_auto_picks_the_fastest_exact_kind_for_the_hardware(machine, gpu, flags, bf16_faster, expected,
                                                            calibrated) -> None:
    calibrations = machine(gpu=gpu, flags=flags, bf16_faster=bf16_faster)
    choice = index_choice.resolve_index("auto", 64)
    assert choice.spec == IndexSpec.named(expected, dims=64)  # canonical: flat, at its precision / device
    assert choice.kind == "flat"
    assert choice.reason
    assert calibrations == ([64] if calibrated else [])


def test_a_named_kind_is_never_replaced(machine) -> None:
    machine(gpu=True, flags=("amx_bf16",))
    for kind in ("exact", "exact-bf16", "ivf"):
        assert index_choice.resolve_index(kind, 64).spec == IndexSpec.named(kind, dims=64)


def test_the_decision_is_made_once_per_width(machine) -> None:
    calibrations = machine(flags=("avx512_bf16",))
    for _ in range(3):
        index_choice.resolve_index("auto", 32)
    index_choice.resolve_index("auto", 48)
    assert calibrations == [32, 48]


def test_bf16_is_not_chosen_where_the_product_cannot_be_certified(machine, monkeypatch) -> None:
    machine(flags=("amx_bf16", "avx512_bf16"))

    def refuse(dim: int) -> None:
        raise RuntimeError("partial sums are rounded")

    monkeypatch.setattr(index_choice, "check_bf16_products", refuse)
    assert index_choice.resolve_index("auto", 64).spec == IndexSpec(kind="flat", dims=64)


def test_cpu_flags_are_read_from_cpuinfo(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 amx_bf16 avx512_bf16\n\n"
                       "processor\t: 1\nflags\t\t: fpu\n")
    assert index_choice.cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_bf16", "avx512_bf16"}
    assert index_choice.cpu_flags(tmp_path / "missing") == set()


@pytest.mark.parametrize("flags,kind", [(("amx_bf16",), "exact-bf16"), ((), "exact")])
def test_build_index_auto_builds_the_chosen_kind_and_stays_exact(machine, flags, kind) -> None:
    machine(flags=flags)
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((500, 24)).astype(np.float32)
    queries = rng.standard_normal((20, 24)).astype(np.float32)
    index = search.build_index(gallery, IndexSpec())
    assert isinstance(index, search_bf16.Bf16ShortlistIndex) == (kind == "exact-bf16")
    scores, ids = search.search(index, queries, 5)
    expected_scores, expected_ids = search.numpy_topk(queries, gallery, 5)
    assert np.array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-5)


def test_torch_index_equals_numpy(machine) -> None:
    """The GPU path's code, run on the CPU device: the same exact top-k."""
    rng = np.random.default_rng(1)
    gallery = rng.standard_normal((700, 32)).astype(np.float32)
    queries = rng.standard_normal((30, 32)).astype(np.float32)
    index = search.TorchExactIndex(gallery, device="cpu")
    scores, ids = search.search(index, queries, 7)
    expected_scores, expected_ids = search.numpy_topk(queries, gallery, 7)
    assert np.array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-5)


def test_unknown_kind_is_refused_and_the_factory_takes_a_spec_only() -> None:
    with pytest.raises(ValueError, match="unknown index kind 'fast'"):
        IndexSpec.named("fast")
    with pytest.raises(TypeError, match="IndexSpec.named"):
        search.build_index(np.ones((3, 4), dtype=np.float32), "exact")  # type: ignore[arg-type]


def _gallery_spec(tmp_path, **options):
    from eval_fakes import make_identity_benchmark

    from vis_embed.data import EvalDatasetSpec

    files = make_identity_benchmark(tmp_path / "data")
    return EvalDatasetSpec("Gal", "gallery", "Re-ID", "OOD", "MVEB", queries=files["queries"], gallery=files["gallery"],
                           image_root=files["images"], query_instruction="Find the same object.",
                           candidate_instruction="Represent the image.", options=options)


def _evaluate(spec, out, **settings) -> dict:
    from eval_fakes import FakeEncoder

    from vis_embed.evaluation.harness import EvalSettings, Harness

    return Harness(FakeEncoder(), out, EvalSettings(show_progress=False, pictures=False, **settings)).run([spec])


@pytest.mark.parametrize("flags,kind", [(("amx_bf16",), "exact-bf16"), (("avx2",), "exact")])
def test_results_json_records_the_kind_auto_chose(machine, tmp_path, flags, kind) -> None:
    machine(flags=flags)
    spec = _gallery_spec(tmp_path)
    results = _evaluate(spec, tmp_path / "out")  # auto is the default
    written = json.loads((tmp_path / "out" / "results.json").read_text())["datasets"]["Gal"]
    assert written["index"] == "flat" and written["index_requested"] == "auto"  # canonical kind recorded
    assert written["index_spec"] == IndexSpec.named(kind, dims=written["dim"]).recorded()
    assert written["index_reason"] == index_choice.resolve_index("auto", 8).reason
    named = _evaluate(spec, tmp_path / "named", index="exact")["datasets"]["Gal"]
    assert named["index"] == "flat" and named["index_requested"] == "exact"  # the alias asked for, kept
    assert results["datasets"]["Gal"]["metrics"] == named["metrics"]  # both exact


def test_manifest_option_auto_is_resolved_too(machine, tmp_path) -> None:
    machine(flags=("amx_bf16",))
    spec = _gallery_spec(tmp_path, index="auto")
    result = _evaluate(spec, tmp_path / "out", index="exact")["datasets"]["Gal"]
    assert result["index"] == "flat" and result["index_requested"] == "auto"
    assert result["index_spec"]["precision"] == "bfloat16"
