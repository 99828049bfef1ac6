"""benchmarks/kernel_profile.py: what the breakdown of a forward's time counts (issue 45).

The figures it produces on a GPU decide where the next fusion goes, so what it sums is
specified here: the union of overlapping kernel intervals, the naming rules that sort kernels
into kinds, and that a CPU profile of a real forward accounts for the matrix products."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from kernel_profile import OTHER, category_of, covered_us, kernel_breakdown  # noqa: E402


def test_covered_time_counts_overlaps_once() -> None:
    # two streams overlapping [5, 10), a gap [12, 20), a kernel inside another
    assert covered_us([(0, 10), (5, 12), (20, 30), (22, 25)]) == 22
    assert covered_us([]) == 0
    assert covered_us([(3, 4)]) == 1


@pytest.mark.parametrize(("name", "category"), [
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<96, 128, 64, 4, false, cutlass::bfloat16_t>>", "attention"),
    ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_TNT", "matrix"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matrix"),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align2", "matrix"),
    ("triton_tem_fused_mm_0", "matrix"),
    ("triton_poi_fused_add_cat_mul_0", "fused (Inductor)"),
    ("triton_red_fused__to_copy_mean_pow_1", "fused (Inductor)"),
    ("Memcpy HtoD (Pinned -> Device)", "copy"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>", "copy"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float>>", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
    ("aten::mm", "matrix"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("aten::mul", "elementwise"),
    ("aten::rms_norm", "norm"),
    ("aten::empty_strided", OTHER),
])
def test_kernels_sorted_by_their_names(name: str, category: str) -> None:
    assert category_of(name) == category


def test_cpu_breakdown_of_a_linear_stack_is_mostly_matrix_products() -> None:
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512))
    inputs = torch.randn(256, 512)
    with torch.inference_mode():
        breakdown = kernel_breakdown(lambda: layers(inputs), torch.device("cpu"))
    assert breakdown["idle_share"] is None  # a CPU runs its operators one after another
    categories = breakdown["by_category_ms"]
    assert categories["matrix"] > 0 and breakdown["kernels"] >= 3
    assert max(categories, key=categories.get) == "matrix"  # 2 x 256x512x512 GEMMs outweigh one GELU
    assert sum(breakdown["share_of_kernel_time"].values()) == pytest.approx(1.0)
    assert breakdown["kernel_ms"] <= breakdown["wall_ms"] * 1.05  # self times fit in the call
    assert {row["category"] for row in breakdown["top"]} >= {"matrix"}
