"""Lesson `position`: the bag-of-words permutation test, the swapped sin/cos table, and a reduced run."""

import math

import pytest
import torch
from torch.testing import assert_close

from core.model import build_transformer
from core.position import POSITIONAL_SCHEMES, sinusoid_table
from tasks.lab import LabSettings, run_lesson
from tasks.lab.position import (
    SCHEMES,
    SwappedSinusoidalPosition,
    permutation_gap,
    remove_positions,
    swap_sin_cos,
    table_geometry,
    use_swapped_sinusoids,
)
from tests.numerics import assert_close_fp64, float64
from tests.tasks.lab.zh_checks import assert_chinese


def _model(position: str = "sinusoidal"):
    return build_transformer("tiny", src_vocab=40, position=position, max_len=32).eval()


@pytest.mark.parametrize("position", [s for s in POSITIONAL_SCHEMES if s != "none"])
@float64()  # permuted tokens are summed in another order: float32 would leave ~1e-6 of kernel-dependent rounding
def test_without_positions_the_encoder_output_permutes_with_its_input(position):
    model = _model(position)
    src = torch.randint(3, 40, (3, 7))
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    with torch.no_grad():
        positional = model.encode(src[:, perm])[0] - model.encode(src)[0][:, perm]
        remove_positions(model)
        memory = model.encode(src)[0]  # (B, S, D)
        assert_close_fp64(model.encode(src[:, perm])[0], memory[:, perm])
    assert positional.abs().max() > 1e-2  # every scheme, left in, breaks the symmetry
    assert permutation_gap(model, src) < 1e-10


@float64()
def test_the_none_scheme_is_already_a_bag_of_words():
    model = _model("none")
    src = torch.randint(3, 40, (3, 7))
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    with torch.no_grad():
        assert_close_fp64(model.encode(src[:, perm])[0], model.encode(src)[0][:, perm])


def test_swapped_table_differs_from_the_standard_exactly_by_the_swap():
    standard, swapped = sinusoid_table(20, 8), swap_sin_cos(sinusoid_table(20, 8))
    assert_close(swapped[:, 0::2], standard[:, 1::2])
    assert_close(swapped[:, 1::2], standard[:, 0::2])
    p = 5  # by hand: dimensions 0 and 1 have frequency 1
    assert swapped[p, 0].item() == pytest.approx(math.cos(p), abs=1e-6)
    assert swapped[p, 1].item() == pytest.approx(math.sin(p), abs=1e-6)
    assert_close(swap_sin_cos(swapped), standard)
    with pytest.raises(ValueError, match="even d_model"):
        swap_sin_cos(torch.zeros(4, 5))


def test_swapped_model_adds_the_swapped_table_and_only_to_sinusoidal_models():
    model = use_swapped_sinusoids(_model())
    assert isinstance(model.position, SwappedSinusoidalPosition)
    assert_close(model.position.embed(torch.zeros(1, 6, 32)), swap_sin_cos(sinusoid_table(6, 32))[None])
    with pytest.raises(ValueError, match="position 33 but the swapped table has 32 rows"):
        model.position.embed(torch.zeros(1, 33, 32))
    with pytest.raises(ValueError, match="replaces sinusoidal positions"):
        use_swapped_sinusoids(_model("learned"))


def test_swapping_keeps_the_offset_geometry():
    standard = sinusoid_table(64, 16).double()  # the swap reorders the dot products' sums: compare in float64
    swapped = swap_sin_cos(standard)
    assert_close_fp64(swapped @ swapped.T, standard @ standard.T)  # PE(p)·PE(q) unchanged
    for table in (standard, swapped):
        geometry = table_geometry(table)
        assert geometry["dot_product_spread_along_offsets"] < 1e-4  # depends on q − p only
        assert geometry["linear_shift_residual"] < 1e-4  # PE(p + k) = PE(p)·M_k


def test_reduced_lesson_holds_and_writes(tmp_path):
    result = run_lesson("position", LabSettings(tmp_path, quick=True, scale=0.05, progress=False))
    f = result.findings
    assert result.holds and all(f["checks"].values())
    assert f["permutation_gap"]["no positions"] < 1e-4 < 1e-2 < f["permutation_gap"]["sinusoidal"]
    assert f["init_ratio"]["lab unscaled"]["ratio"] > f["init_ratio"]["lab scaled"]["ratio"]
    assert f["mismatch"]["test_loss"] > f["runs"]["sinusoidal"]["test_loss"]
    assert f["learned_rows"]["max_change_beyond"] == 0.0
    assert set(f["runs"]) >= set(SCHEMES) | {"no positions", "swapped sin/cos", "unscaled embeddings"}
    for name in ("lesson.md", "result.json", "position_contrasts.png", "position_extrapolation.png"):
        assert (tmp_path / name).exists()
    assert result.figures == ["position_contrasts.png", "position_extrapolation.png"]
    assert_chinese("position", result, tmp_path)
