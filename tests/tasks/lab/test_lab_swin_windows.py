"""Lesson `swin-windows`: the no-shift switch, the cost counts, receptive fields from gradients checked against the
windows' own connectivity, the shift mask at the corner, the verdict from the numbers, and a reduced run."""

import json

import pytest
import torch

from tasks.lab import LabSettings, run_lesson
from tasks.lab.swin_windows import (
    FIELD_BLOCKS,
    FIELD_TOKEN,
    FIELD_WINDOW,
    _findings,
    _verdict,
    attention_cost,
    attention_layer,
    cifar_model,
    corner_leak,
    field_model,
    receptive_field,
    receptive_fields,
    shifts,
    unshifted,
    window_of,
)
from tests.tasks.lab.zh_checks import assert_chinese, assert_same_numbers
from zoo.swin.attention import WindowAttention


def test_the_switch_removes_every_shift_and_keeps_the_weights():
    model = cifar_model(0, shift=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tables = [m.relative_position for m in model.modules() if isinstance(m, WindowAttention)]
    assert shifts(model) == [0, 2, 0, 2]
    images = torch.randn(2, 1, 32, 32)
    shifted_out = model.eval()(images)
    unshifted(model)
    assert shifts(model) == [0, 0, 0, 0]
    assert [m.relative_position for m in model.modules() if isinstance(m, WindowAttention)] == tables  # same objects
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert not torch.allclose(model(images), shifted_out)  # same weights, different wiring


def test_cost_counts_are_the_formulas_and_their_exponents():
    sides = (8, 16, 32)
    cost = attention_cost(sides, rounds=1)
    d, window_area = 64, 64  # COST_DIM, 8×8 windows
    for i, side in enumerate(sides):
        n = side * side
        assert cost["global"]["kernel_flops"][i] == 4 * n * n * d  # Q·Kᵀ and weights·V, 2 FLOPs per MAC
        assert cost["window"]["kernel_flops"][i] == 4 * n * window_area * d
        projections = 2 * n * d * 4 * d  # packed QKV (3D) and output (D) projections
        assert cost["global"]["flops"][i] == projections + 4 * n * n * d
    assert all(s > 0 for kind in cost.values() for s in kind["seconds"])


def test_bad_layer_and_field_arguments_get_one_line_errors():
    with pytest.raises(ValueError, match="kind='local'"):
        attention_layer("local", 16)
    with pytest.raises(ValueError, match="side=12 is not a multiple of window=8"):
        attention_layer("window", 12)
    with pytest.raises(ValueError, match="rounds"):
        attention_cost((8,), rounds=0)
    model = field_model(0, shift=True)
    with pytest.raises(ValueError, match=r"token=\(16, 0\) is outside the 16×16 patch grid"):
        receptive_field(model, (16, 0), 1)
    with pytest.raises(ValueError, match="blocks=5: the model has 4 blocks"):
        receptive_field(model, FIELD_TOKEN, 5)


def _connectivity_fields(model, token, blocks):
    """The field composed from each block's attention pattern (which keys get non-zero weight), a second path."""
    grid = model.config.grid
    n = grid * grid
    reach = torch.eye(n, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    out = {}
    for k, layer in enumerate(model.encoder.layers[: max(blocks)], start=1):
        kernel = layer.self_attn.kernel
        q, kk, v = torch.randn(3, 1, 2, n, 8, generator=gen, dtype=torch.float64)
        _, weights = kernel(q, kk, v, need_weights=True)  # (1, H, N, N)
        allowed = (weights[0] > 0).any(0).double()  # (N, N): query i reads key j
        reach = ((allowed @ reach) > 0).double()  # the residual keeps the diagonal in every block
        out[k] = reach[token[0] * grid + token[1]].view(grid, grid) > 0
    return {k: out[k] for k in blocks}


@pytest.mark.parametrize("shift", [False, True])
def test_gradient_fields_match_the_windows_connectivity(shift):
    model = field_model(0, shift)
    expected = _connectivity_fields(model, FIELD_TOKEN, FIELD_BLOCKS)
    for k in FIELD_BLOCKS:
        assert torch.equal(receptive_field(model, FIELD_TOKEN, k), expected[k]), (shift, k)


def test_without_the_shift_nothing_crosses_a_window_edge_with_it_the_field_grows():
    fields = receptive_fields(0)
    window = window_of(FIELD_TOKEN, FIELD_WINDOW, 16)
    for k in FIELD_BLOCKS:
        assert torch.equal(fields["no shift"][k], window), k  # exactly its window: nothing inside is cut off either
    assert torch.equal(fields["shift"][1], window)
    counts = [int(fields["shift"][k].sum()) for k in FIELD_BLOCKS]
    assert counts == sorted(counts) and counts[0] < counts[1] < counts[2]
    assert (fields["shift"][2] & ~window).any()
    # token (5, 6): block 2's shifted window spans rows 2-5, cols 6-9; their block-1 windows: rows 0-7, cols 4-11
    rows, cols = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
    assert torch.equal(fields["shift"][2], (rows < 8) & (cols >= 4) & (cols < 12))


def test_the_shift_mask_keeps_the_far_edge_out_of_the_corner():
    assert corner_leak(0) == 0
    model = field_model(0, shift=True)
    for m in model.modules():  # the cyclic shift with its mask removed: every window attends whole
        if isinstance(m, WindowAttention) and m.shift_mask is not None:
            m.shift_mask = torch.ones_like(m.shift_mask)
    field = receptive_field(model, (0, 0), 2)
    assert field[-1].any() and field[:, -1].any()  # the roll made the far edge the corner's neighbour


def _synthetic(window_exponent: float, right_shift: float, right_plain: float, fields=None):
    sides = (8, 16, 32, 64)
    tokens = [s * s for s in sides]
    cost = {"global": {"flops": [float(n * n) for n in tokens], "kernel_flops": [float(n * n) for n in tokens],
                       "seconds": [n * n * 1e-9 for n in tokens]},
            "window": {"flops": [float(n**window_exponent) for n in tokens],
                       "kernel_flops": [float(n**window_exponent) for n in tokens],
                       "seconds": [n**window_exponent * 1e-7 for n in tokens]}}
    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(1000, generator=gen)
    runs = {}
    for name, share in (("shift", right_shift), ("no shift", right_plain)):
        right = torch.zeros(1000, dtype=torch.bool)
        right[order[: round(1000 * share)]] = True  # nested: the weaker model's right images are among the other's
        runs[name] = {"losses": [1.0] * 30, "correct": right, "accuracy": float(right.float().mean())}
    return _findings(cost, sides, fields if fields is not None else receptive_fields(0), 0, runs, 30)


def test_the_verdict_follows_the_numbers_both_ways():
    fields = receptive_fields(0)
    held = _synthetic(1.0, 0.70, 0.60, fields)
    assert held["holds"] and all(held["checks"].values())
    first, second = _verdict(held)
    assert first.startswith("Windows make attention linear") and "N^1.00 in windows vs N^2.00 globally" in first
    assert "stays its 16-patch window" in second and "16 → 64 → 192 patches" in second
    assert "after 30 training steps the shift raises test top-1: 70.0 % vs 60.0 % (+10.0 points" in second
    first_zh, second_zh = _verdict(held, "zh")
    assert first_zh.startswith("窗口确实让注意力") and "16 → 64 → 192 个图像块" in second_zh and "提高了" in second_zh
    assert_same_numbers((first, second), (first_zh, second_zh))
    quadratic = _synthetic(2.0, 0.70, 0.60, fields)
    assert not quadratic["holds"] and _verdict(quadratic)[0].startswith("Windows do not make attention linear")
    tie = _synthetic(1.0, 0.601, 0.600, fields)
    assert tie["holds"] and "within noise" in _verdict(tie)[1]  # accuracy is reported, not part of the claim
    assert "噪声范围内" in _verdict(tie, "zh")[1] and _verdict(quadratic, "zh")[0].startswith("窗口没有")
    blind = {name: {k: window_of(FIELD_TOKEN, FIELD_WINDOW, 16) for k in FIELD_BLOCKS} for name in fields}
    assert not _synthetic(1.0, 0.70, 0.60, blind)["holds"]  # a shift whose field never grows breaks the claim


def test_reduced_lesson_measures_and_writes(tmp_path):
    result = run_lesson("swin-windows", LabSettings(tmp_path, quick=True, scale=0.1, progress=False))
    f = result.findings
    assert result.holds and f["sides"] == [8, 16, 32, 64]
    exponents = f["exponents"]
    assert abs(exponents["window"]["kernel_flops"] - 1) < 1e-9 and abs(exponents["global"]["kernel_flops"] - 2) < 1e-9
    assert f["field"]["outside_window"]["no shift"] == {1: 0, 2: 0, 4: 0}
    assert f["field"]["patches"]["shift"] == {1: 16, 2: 64, 4: 192}
    assert 0.0 <= f["accuracy"]["shift"] <= 1.0 and f["steps"] == 30
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["findings"]["mask"]["allowed_share"] == {"interior": 1.0, "edge": 0.5, "corner": 0.25}
    for name in ("lesson.md", "result.json", *result.figures):
        assert (tmp_path / name).exists()
    assert len(result.figures) == 4
    assert_chinese("swin-windows", result, tmp_path)
