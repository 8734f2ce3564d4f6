"""Lesson ``swin-windows``: Swin's windows make attention linear in the image size; the shift lets it cross them.

Liu et al. 2021, §3.2: global self-attention over the N = h·w patches of an image costs O(N²); attention
inside non-overlapping M×M windows costs O(N·M²), linear in N for a fixed M. Windows alone never exchange
information, so every other block shifts the windows by ⌊M/2⌋ (a cyclic roll of the map, with a mask that keeps
the tokens brought round from the far edge apart). The lesson measures the claim on the real
:mod:`zoo.swin` code:

(a) **cost**: one multi-head attention layer of width 64 with the core global kernel vs Swin's
    :class:`~zoo.swin.attention.WindowAttention` (8×8 windows, shifted, relative bias) on maps of 8² to 96²
    patches (more sizes in between in the full run): forward FLOPs by the package's counter
    (:func:`zoo.analysis.delta.module_flops`, FLOPs = 2·MACs), kernel alone and whole layer, and wall time (median of
    interleaved rounds), with the fitted exponent of N;
(b) **receptive field**: on a 16×16 patch grid with 4×4 windows, which input patches can move one output token
    after 1, 2 and 4 blocks, with and without the shift: the gradient of that token's norm with respect to the
    image, marked where it is not zero (float64, at initialisation: the field is a property of the wiring);
(c) **the shift mask** (:func:`zoo.swin.windows.shifted_window_mask`) of a window on an edge and in the corner;
(d) **accuracy** with and without the shift on the embedded Fashion-MNIST, same initial weights, batches and
    budget, paired per test image (McNemar's exact test).

The shift-less model is a lab switch, :func:`unshifted`: every shifted :class:`WindowAttention` of a built
model is replaced by an unshifted one that keeps the same relative-position table and inner kernel.
For (b) and (d) the blocks run at one resolution (``hierarchy=False``): Swin's patch merging also mixes
neighbouring windows, and at CPU sizes its last stage is a single window, which would hide what the shift
alone buys.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from core.attention import ScaledDotProductAttention
from core.multihead import MultiHeadAttention
from plumbing.errors import check_positive
from plumbing.tables import markdown_table
from tasks.cifar.datasets import channel_stats
from tasks.compare.stats import mcnemar_exact
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.scale import log_slope
from tasks.lab.small_data import Images, Normalize, load, train
from tasks.lab.toolkit import figure, save, smooth, translated
from zoo.analysis.delta import FLOP_CONVENTION, module_flops
from zoo.registry import create
from zoo.swin.attention import WindowAttention
from zoo.swin.relative_position import RelativePositionBias
from zoo.swin.windows import shifted_window_mask

# (a) one attention layer of Swin-T's head width (32) at a width a CPU times in seconds
COST_DIM, COST_HEADS, COST_WINDOW = 64, 2, 8
# (b, c) the 16×16 patch grid of a 32×32 image at patch 2, 4×4 windows shifted by 2, one output token inside a window
FIELD_GRID, FIELD_WINDOW, FIELD_BLOCKS, FIELD_TOKEN = 16, 4, (1, 2, 4), (5, 6)
# (d) four blocks at one resolution on the 8×8 grid of patch 4: 2×2 windows of 4×4 patches; 0.15 s per step (loaded)
LESSON_SWIN = dict(patch_size=4, embed_dim=32, depths=(4,), heads=(2,), window_size=4, hierarchy=False,
                   drop_path=0.0)
LR = 5e-3  # the lesson's batches of 32 at 300-1,500 steps: 2e-3 left both models near 45 % after 300 steps
LINEAR, QUADRATIC, SLACK = 1.0, 2.0, 0.15  # expected exponents of N, and how far a fit may be from them
# zoo.analysis.delta.FLOP_CONVENTION (the findings' "flop_convention") in Chinese, for lesson.zh.md
FLOP_CONVENTION_ZH = ("前向 FLOPs = 矩阵乘法、卷积和注意力的 2·MACs（torch.utils.flop_counter，math 注意力后端）；"
                      "逐元素运算、softmax 和归一化不计入")


def unshifted(model: nn.Module) -> nn.Module:
    """The lab switch: every shifted window attention of ``model`` becomes unshifted (W-MSA in every block).

    The replacement keeps the layer's relative position table and inner kernel (the same parameters), so a
    model built from one seed has the same weights with and without the shift. Returns ``model``.
    """
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and isinstance(module.kernel, WindowAttention):
            old = module.kernel
            if old.shift:
                module.kernel = WindowAttention(old.resolution, old.window, 0, old.relative_position, old.kernel)
    return model


def shifts(model: nn.Module) -> list[int]:
    """The cyclic shift of every window attention of ``model``, block by block."""
    return [m.shift for m in model.modules() if isinstance(m, WindowAttention)]


# --- (a) cost ----------------------------------------------------------------------------------------------
def attention_layer(kind: str, side: int, dim: int = COST_DIM, heads: int = COST_HEADS,
                    window: int = COST_WINDOW) -> MultiHeadAttention:
    """One multi-head attention over a ``side``×``side`` map: ``"global"`` (the core fused kernel) or ``"window"``
    (Swin's shifted windows with relative bias, as :class:`~zoo.swin.model.SwinTransformer` builds an odd block).

    A map no larger than one window is one window with nothing to shift, as in Swin's config.
    """
    if kind == "global":
        return MultiHeadAttention(dim, heads, ScaledDotProductAttention())
    if kind != "window":
        raise ValueError(f"kind={kind!r}: use 'global' or 'window'")
    if side % window:
        raise ValueError(f"side={side} is not a multiple of window={window}; use sides {window}, {2 * window}, …")
    shift = window // 2 if window < side else 0
    kernel = WindowAttention(side, window, shift, RelativePositionBias(window, heads), ScaledDotProductAttention())
    return MultiHeadAttention(dim, heads, kernel)


def cost_sides(settings: LabSettings) -> tuple[int, ...]:
    """Map sides of the cost curves: up to 96² patches (the global math-path scores of 96² take 0.7 GB at
    the FLOP count; 128² would take 2 GB each for scores and weights); a reduced run (``scale`` < 1) stops at 64²."""
    if settings.scale < 1:
        return (8, 16, 32, 64)
    return (8, 16, 32, 64, 96) if settings.quick else (8, 16, 24, 32, 48, 64, 96)


@torch.no_grad()
def attention_cost(sides: Sequence[int], rounds: int, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """Forward FLOPs (kernel alone and whole layer) and median wall time of both layers at each map side.

    Timing rounds are interleaved (every size and kind once per round) so that a busy machine slows all alike.
    Returns ``{kind: {"flops", "kernel_flops", "seconds": [per side]}}``.
    """
    check_positive("rounds", rounds)
    torch.manual_seed(seed)
    layers = {(kind, s): attention_layer(kind, s).eval() for kind in ("global", "window") for s in sides}
    inputs = {s: torch.randn(1, s * s, COST_DIM) for s in sides}  # (1, N, D)
    out: dict[str, dict[str, list[float]]] = {k: {"flops": [], "kernel_flops": [], "seconds": []}
                                              for k in ("global", "window")}
    for (kind, s), layer in layers.items():
        per_module, total = module_flops(layer, (inputs[s],))
        out[kind]["flops"].append(total)
        out[kind]["kernel_flops"].append(per_module["kernel"])
        layer(inputs[s])  # warm-up
    times: dict[tuple[str, int], list[float]] = {key: [] for key in layers}
    for _ in range(rounds):
        for (kind, s), layer in layers.items():
            start = time.perf_counter()
            layer(inputs[s])
            times[kind, s].append(time.perf_counter() - start)
    for (kind, s) in layers:
        out[kind]["seconds"].append(statistics.median(times[kind, s]))
    return out


# --- (b) receptive field -------------------------------------------------------------------------------------
def field_model(seed: int, shift: bool) -> nn.Module:
    """Four Swin blocks at one resolution on the ``FIELD_GRID``² patch grid of a 32×32 image (patch 2), float64."""
    torch.manual_seed(seed)
    model = create("swin", task="cifar", preset="tiny", in_channels=1, image_size=32, patch_size=32 // FIELD_GRID,
                       window_size=FIELD_WINDOW, depths=(max(FIELD_BLOCKS),), heads=(2,), hierarchy=False,
                       drop_path=0.0)
    return (model if shift else unshifted(model)).double().eval()


def receptive_field(model: nn.Module, token: tuple[int, int], blocks: int, seed: int = 0) -> Tensor:
    """Which input patches move output ``token`` (row, column) of the first ``blocks`` blocks of ``model``.

    Backpropagates that token's norm to a random image and marks the patches with any non-zero gradient:
    outside the field there is no path at all, or only through weights the mask set to exactly 0, so those
    gradients are exactly 0. Shape: ``(Hr, Wr)`` bool on the patch grid.
    """
    config = model.config
    grid, patch = config.grid, config.patch_size
    row, col = token
    if not (0 <= row < grid and 0 <= col < grid):
        raise ValueError(f"token={token} is outside the {grid}×{grid} patch grid; use rows and columns in [0, {grid})")
    layers = model.encoder.layers
    if not 1 <= blocks <= len(layers):
        raise ValueError(f"blocks={blocks}: the model has {len(layers)} blocks; use 1 … {len(layers)}")
    gen = torch.Generator().manual_seed(seed)
    image = torch.randn(1, config.in_channels, config.image_size, config.image_size, generator=gen,
                        dtype=torch.float64, requires_grad=True)  # (1, C, H, W)
    x = model.embed(image)  # (1, N, D)
    for layer in layers[:blocks]:
        x = layer(x)
    x[0, row * grid + col].norm().backward()
    grad = image.grad.abs().sum(1)[0]  # (H, W)
    return grad.unflatten(0, (grid, patch)).unflatten(2, (grid, patch)).sum((1, 3)) > 0  # (Hr, Wr)


def window_of(token: tuple[int, int], window: int, grid: int) -> Tensor:
    """The unshifted window that holds ``token``, as a ``(grid, grid)`` bool map."""
    inside = torch.zeros(grid, grid, dtype=torch.bool)
    top, left = (token[0] // window) * window, (token[1] // window) * window
    inside[top : top + window, left : left + window] = True
    return inside


def receptive_fields(seed: int) -> dict[str, dict[int, Tensor]]:
    """The field of ``FIELD_TOKEN`` after each of ``FIELD_BLOCKS`` blocks, with and without the shift."""
    models = {name: field_model(seed, name == "shift") for name in ("no shift", "shift")}
    return {name: {k: receptive_field(model, FIELD_TOKEN, k, seed) for k in FIELD_BLOCKS}
            for name, model in models.items()}


def corner_leak(seed: int, blocks: int = 2) -> int:
    """Patches on the far (last) row or column that move the top-left token after ``blocks`` shifted-model blocks.

    The roll brings them next to it inside one window; the shift mask must keep them apart, so this is 0.
    """
    field = receptive_field(field_model(seed, True), (0, 0), blocks, seed)
    return int(field[-1].sum() + field[:, -1].sum() - field[-1, -1].int())


# --- (d) accuracy --------------------------------------------------------------------------------------------
def cifar_model(seed: int, shift: bool) -> nn.Module:
    """The lesson's Swin (``LESSON_SWIN``) for the embedded 32×32 single-channel images, with or without the shift."""
    torch.manual_seed(seed)
    model = create("swin", task="cifar", preset="cpu", in_channels=1, num_classes=10, **LESSON_SWIN)
    return model if shift else unshifted(model)


@torch.no_grad()
def correct(model: nn.Module, images: Images, normalize: Normalize) -> Tensor:
    """Whether each of the test images is classified right. Shape: ``(N,)`` bool."""
    model.eval()
    x = images.test_x
    preds = torch.cat([model(normalize(x[j : j + 500])).argmax(-1) for j in range(0, len(x), 500)])  # (N,)
    return preds == images.test_y


def train_pair(settings: LabSettings, steps: int) -> dict[str, dict]:
    """The same Swin (seed, weights, batches, schedule) trained with and without the shift on all 5,000 images."""
    images = load()
    index = torch.arange(len(images.train_y))
    normalize = Normalize(*channel_stats(images.train_x.numpy()))
    out = {}
    for name in ("shift", "no shift"):
        model = cifar_model(settings.seed, name == "shift")
        losses = train(model, images, index, steps, normalize, settings.seed, progress=settings.progress,
                       desc=f"Swin, {name}", lr=LR)
        right = correct(model, images, normalize)
        out[name] = {"losses": losses, "correct": right, "accuracy": float(right.float().mean())}
    return out


# --- findings, verdict, report ---------------------------------------------------------------------------------
def _findings(cost: dict, sides: Sequence[int], fields: dict, leak: int, runs: dict, steps: int) -> dict:
    tokens = [s * s for s in sides]
    tail = slice(-3, None)  # wall time: the three largest maps, where the arithmetic, not the overhead, dominates
    exponents = {kind: {"kernel_flops": log_slope(tokens, c["kernel_flops"]),
                        "flops": log_slope(tokens, c["flops"]),
                        "seconds": log_slope(tokens[tail], c["seconds"][tail])} for kind, c in cost.items()}
    window = window_of(FIELD_TOKEN, FIELD_WINDOW, FIELD_GRID)
    counts = {name: {k: int(f.sum()) for k, f in by.items()} for name, by in fields.items()}
    outside = {name: {k: int((f & ~window).sum()) for k, f in by.items()} for name, by in fields.items()}
    last = max(FIELD_BLOCKS)
    a, b = runs["shift"]["correct"], runs["no shift"]["correct"]
    only_shift, only_plain = int((a & ~b).sum()), int((b & ~a).sum())
    accuracy = {name: r["accuracy"] for name, r in runs.items()}
    p_value = mcnemar_exact(only_shift, only_plain)
    checks = {
        f"windowed kernel FLOPs grow as N^{LINEAR:g} (±{SLACK})":
            abs(exponents["window"]["kernel_flops"] - LINEAR) < SLACK,
        f"global kernel FLOPs grow as N^{QUADRATIC:g} (±{SLACK})":
            abs(exponents["global"]["kernel_flops"] - QUADRATIC) < SLACK,
        "without the shift the field stays inside the token's window at every depth":
            all(v == 0 for v in outside["no shift"].values()),
        f"with the shift the field leaves the window and grows from 1 to {last} blocks":
            outside["shift"][last] > 0 and counts["shift"][last] > counts["shift"][1],
        "the shift mask keeps wrapped tokens apart (nothing from the far edge reaches the corner)": leak == 0,
        "the shift raises test accuracy": accuracy["shift"] > accuracy["no shift"],
    }
    claim = [c for c in checks if "accuracy" not in c]  # the article's claim is about cost and reach
    mask = shifted_window_mask((FIELD_GRID, FIELD_GRID), FIELD_WINDOW, FIELD_WINDOW // 2)
    return {
        "flop_convention": FLOP_CONVENTION, "cost_layer": {"dim": COST_DIM, "heads": COST_HEADS, "window": COST_WINDOW},
        "sides": list(sides), "tokens": tokens, "cost": cost, "exponents": exponents,
        "field": {"grid": FIELD_GRID, "window": FIELD_WINDOW, "token": list(FIELD_TOKEN), "blocks": list(FIELD_BLOCKS),
                  "patches": counts, "outside_window": outside,
                  "maps": {name: {k: f.int().tolist() for k, f in by.items()} for name, by in fields.items()},
                  "corner_leak": leak},
        "mask": {"allowed_share": {"interior": 1.0, "edge": float(mask[FIELD_GRID // FIELD_WINDOW - 1].float().mean()),
                                   "corner": float(mask[-1].float().mean())}},
        "steps": steps, "lr": LR, "model": dict(LESSON_SWIN), "accuracy": accuracy,
        "accuracy_gain": accuracy["shift"] - accuracy["no shift"],
        "discordant": {"only with the shift": only_shift, "only without": only_plain}, "mcnemar_p": p_value,
        "final_loss": {name: sum(r["losses"][-20:]) / len(r["losses"][-20:]) for name, r in runs.items()},
        "curves": {name: r["losses"] for name, r in runs.items()},
        "checks": checks, "holds": all(checks[c] for c in claim),
    }


def _verdict(f: dict, lang: str = "en") -> tuple[str, str]:
    """Two lines from the findings' numbers (their wording follows the measured direction), in ``lang``."""
    e, n = f["exponents"], f["tokens"]
    cost = f["cost"]
    linear = abs(e["window"]["kernel_flops"] - LINEAR) < SLACK and abs(e["global"]["kernel_flops"] - QUADRATIC) < SLACK
    if lang == "zh":
        return _verdict_zh(f, linear)
    first = (f"Windows {'make' if linear else 'do not make'} attention linear in the image size: from {n[0]} to "
             f"{n[-1]} patches the kernel's FLOPs grow as N^{e['window']['kernel_flops']:.2f} in windows vs "
             f"N^{e['global']['kernel_flops']:.2f} globally (time N^{e['window']['seconds']:.2f} vs "
             f"N^{e['global']['seconds']:.2f}); at {n[-1]} patches the global layer costs "
             f"{cost['global']['flops'][-1] / cost['window']['flops'][-1]:.1f}× the FLOPs and "
             f"{cost['global']['seconds'][-1] / cost['window']['seconds'][-1]:.1f}× the time of the windowed layer.")
    fld, last = f["field"], max(f["field"]["blocks"])
    p, w = fld["patches"], fld["window"] ** 2
    gain = 100 * f["accuracy_gain"]
    significant = f["mcnemar_p"] < 0.05
    effect = (("raises" if gain > 0 else "lowers") + " test top-1" if significant
              else "changes test top-1 within noise")
    second = (f"Without the shift one token's receptive field stays its {w}-patch window "
              f"({p['no shift'][1]} → {p['no shift'][last]} patches over {last} blocks, "
              f"{fld['outside_window']['no shift'][last]} outside); with it the field grows "
              f"{' → '.join(str(p['shift'][k]) for k in fld['blocks'])} patches after "
              f"{', '.join(str(k) for k in fld['blocks'])} blocks; after {f['steps']} training steps the shift "
              f"{effect}: {100 * f['accuracy']['shift']:.1f} % vs {100 * f['accuracy']['no shift']:.1f} % "
              f"({gain:+.1f} points, McNemar p = {f['mcnemar_p']:.2g}; training loss "
              f"{f['final_loss']['shift']:.2f} vs {f['final_loss']['no shift']:.2f}).")
    return first, second


def _verdict_zh(f: dict, linear: bool) -> tuple[str, str]:
    """:func:`_verdict` in Chinese: the same numbers, formatted the same way."""
    e, n, cost = f["exponents"], f["tokens"], f["cost"]
    fld, last = f["field"], max(f["field"]["blocks"])
    p, w = fld["patches"], fld["window"] ** 2
    gain = 100 * f["accuracy_gain"]
    effect = (("提高了" if gain > 0 else "降低了") + "测试集 top-1" if f["mcnemar_p"] < 0.05
              else "对测试集 top-1 的影响在噪声范围内")
    first = (f"窗口{'确实' if linear else '没有'}让注意力的计算量随图像大小线性增长：从 {n[0]} 到 {n[-1]} 个图像块，"
             f"注意力核的 FLOPs 在窗口内按 N^{e['window']['kernel_flops']:.2f} 增长，全局按 "
             f"N^{e['global']['kernel_flops']:.2f} 增长（时间 N^{e['window']['seconds']:.2f} 对 "
             f"N^{e['global']['seconds']:.2f}）；在 {n[-1]} 个图像块时，全局层的 FLOPs 是窗口层的 "
             f"{cost['global']['flops'][-1] / cost['window']['flops'][-1]:.1f}×，时间是 "
             f"{cost['global']['seconds'][-1] / cost['window']['seconds'][-1]:.1f}×。")
    second = (f"不移位时，一个 token 的感受野始终是它所在的 {w} 个图像块的窗口（{last} 个块内从 {p['no shift'][1]} 到 "
              f"{p['no shift'][last]} 个图像块，窗口外 {fld['outside_window']['no shift'][last]} 个）；移位后感受野在 "
              f"{', '.join(str(k) for k in fld['blocks'])} 个块之后增长为 "
              f"{' → '.join(str(p['shift'][k]) for k in fld['blocks'])} 个图像块；训练 {f['steps']} 步后，移位"
              f"{effect}：{100 * f['accuracy']['shift']:.1f} % 对 {100 * f['accuracy']['no shift']:.1f} %"
              f"（{gain:+.1f} 个百分点，McNemar p = {f['mcnemar_p']:.2g}；训练损失 "
              f"{f['final_loss']['shift']:.2f} 对 {f['final_loss']['no shift']:.2f}）。")
    return first, second


def _words_zh(f: dict) -> dict[str, str]:
    """The Chinese of the tables' headings and words, and of the checks' sentences (some name the measured depth)."""
    last = max(f["field"]["blocks"])
    return {"patches N": "图像块数 N", "global MFLOPs": "全局 MFLOPs", "global ms": "全局 ms",
            "window MFLOPs": "窗口 MFLOPs", "window ms": "窗口 ms", "attention": "注意力", "global": "全局",
            "window": "窗口", "kernel FLOPs": "注意力核 FLOPs", "layer FLOPs": "整层 FLOPs",
            "time (3 largest maps)": "时间（最大的 3 个尺寸）", "blocks": "块数", "no shift: patches": "不移位："
            "图像块数",
            "shift: patches": "移位：图像块数", "no shift: outside the window": "不移位：窗口外",
            "shift: outside the window": "移位：窗口外", "model": "模型", "shift": "移位", "no shift": "不移位",
            "test top-1": "测试集 top-1", "final loss (last 20 steps)": "最终损失（最后 20 步）",
            "direction": "方向", "seen": "观察到",
            f"windowed kernel FLOPs grow as N^{LINEAR:g} (±{SLACK})": f"窗口注意力核的 FLOPs 按 N^{LINEAR:g} "
            f"增长（±{SLACK}）",
            f"global kernel FLOPs grow as N^{QUADRATIC:g} (±{SLACK})":
                f"全局注意力核的 FLOPs 按 N^{QUADRATIC:g} 增长（±{SLACK}）",
            "without the shift the field stays inside the token's window at every depth":
                "不移位时，任何深度下感受野都不出 token 所在的窗口",
            f"with the shift the field leaves the window and grows from 1 to {last} blocks":
                f"移位后感受野走出窗口，并从 1 个块到 {last} 个块不断变大",
            "the shift mask keeps wrapped tokens apart (nothing from the far edge reaches the corner)":
                "移位掩码把卷回来的 token 隔开（远端边缘的内容到不了角落）",
            "the shift raises test accuracy": "移位提高了测试准确率"}


def _body(f: dict, lang: str = "en") -> str:
    """The markdown between the verdict and the plots, in ``lang`` ("en" or "zh"): tables built once, relabelled."""
    cost_rows = [{"patches N": n, **{f"{kind} {what}": f["cost"][kind][key][i] / scale
                                     for kind in ("global", "window") for what, key, scale in
                                     (("MFLOPs", "flops", 1e6), ("ms", "seconds", 1e-3))}}
                 for i, n in enumerate(f["tokens"])]
    exp_rows = [{"attention": kind, "kernel FLOPs": e["kernel_flops"], "layer FLOPs": e["flops"],
                 "time (3 largest maps)": e["seconds"]} for kind, e in f["exponents"].items()]
    fld = f["field"]
    field_rows = [{"blocks": k, **{f"{name}: patches": fld["patches"][name][k] for name in ("no shift", "shift")},
                   **{f"{name}: outside the window": fld["outside_window"][name][k] for name in ("no shift", "shift")}}
                  for k in fld["blocks"]]
    acc_rows = [{"model": name, "test top-1": f["accuracy"][name], "final loss (last 20 steps)": f["final_loss"][name]}
                for name in ("shift", "no shift")]
    checks = [{"direction": k, "seen": "✓" if v else "✗"} for k, v in f["checks"].items()]
    c = f["cost_layer"]
    share = f["mask"]["allowed_share"]
    if lang == "zh":
        words = _words_zh(f)
        cost_rows, exp_rows, field_rows, acc_rows, checks = (
            translated(rows, words) for rows in (cost_rows, exp_rows, field_rows, acc_rows, checks))
        return "\n\n".join([
            "## (a) 图像变大时一个注意力层的代价",
            f"宽度 {c['dim']}，{c['heads']} 个头，批大小 1；窗口为 {c['window']}×{c['window']} 个图像块，移位，"
            f"带相对位置偏置（只有一个窗口的特征图无从移位）。FLOPs：{FLOP_CONVENTION_ZH}。时间："
            "前向，多轮交替测量取中位数，机器上同时在跑什么就算什么。",
            markdown_table(cost_rows),
            "代价 ∝ N^p 拟合出的指数 p：",
            markdown_table(exp_rows),
            "两种层的投影都要 8·N·D² FLOPs，所以只有当打分的 N²·D 超过投影时，整个全局层才接近 N²；"
            "只看注意力核，指数才干净。",
            f"## (b) token {tuple(fld['token'])} 在 {fld['grid']}×{fld['grid']} 图像块网格上的感受野",
            f"{fld['window']}×{fld['window']} 的窗口，每隔一个块移位 {fld['window'] // 2}；统计对该 token 输出范数"
            "梯度不为零的图像块（float64，初始化时）。",
            markdown_table(field_rows),
            f"左上角的 token，移位的 2 个块：远端行/列有 {fld['corner_leak']} 个图像块能到达它："
            "循环移位把它们卷进了它的窗口，掩码又把它们挡在外面。",
            "## (c) 移位掩码",
            f"允许的查询–键对所占比例：内部窗口 {share['interior']:.0%}，右边缘窗口 {share['edge']:.0%}，"
            f"角落窗口 {share['corner']:.0%}（循环移位带进了 1 个或 3 个外来区域）。",
            f"## (d) 有无移位时的准确率（{f['steps']} 步，每步 32 张图像，峰值学习率 {f['lr']:g}）",
            f"本课的 Swin：{f['model']}；两者的权重、批次和调度都相同。只被一个模型判对的测试图像："
            f"有移位 {f['discordant']['only with the shift']} 张，无移位 {f['discordant']['only without']} 张"
            f"（McNemar 精确检验 p = {f['mcnemar_p']:.3g}）。",
            markdown_table(acc_rows),
            "预算短时，测到的既是模型最终到达哪里，也是它学得多快：请对照损失曲线，终态则看完整运行的更长预算"
            "（`zoo lab swin-windows`，不加 `--quick`）。",
            "## 方向（准确率这一项不属于文章的论断）", markdown_table(checks),
        ])
    return "\n\n".join([
        "## (a) Cost of one attention layer as the image grows",
        f"Width {c['dim']}, {c['heads']} heads, batch 1; windows of {c['window']}×{c['window']} patches, shifted, "
        f"with relative bias (a map of one window has nothing to shift). FLOPs: {f['flop_convention']}. Time: "
        "forward, median of interleaved rounds, on whatever else the machine was running.",
        markdown_table(cost_rows),
        "Fitted exponent p of cost ∝ N^p:",
        markdown_table(exp_rows),
        "The projections cost 8·N·D² FLOPs in both layers, so the whole global layer approaches N² only once "
        "the N²·D of the scores outgrows them; the kernel alone shows the exponents cleanly.",
        f"## (b) Receptive field of token {tuple(fld['token'])} on the {fld['grid']}×{fld['grid']} patch grid",
        f"{fld['window']}×{fld['window']} windows, shifted by {fld['window'] // 2} in every second block; patches with "
        "a non-zero gradient of the token's output norm (float64, at initialisation).",
        markdown_table(field_rows),
        f"Top-left token, 2 blocks with the shift: {fld['corner_leak']} patches of the far row/column reach it: the "
        "roll puts them in its window, the mask keeps them out.",
        "## (c) The shift mask",
        f"Share of allowed query–key pairs: interior window {share['interior']:.0%}, right-edge window "
        f"{share['edge']:.0%}, corner window {share['corner']:.0%} (the roll brought 1 or 3 foreign regions in).",
        f"## (d) Accuracy with and without the shift ({f['steps']} steps of 32 images, peak rate {f['lr']:g})",
        f"The lesson's Swin: {f['model']}; the same weights, batches and schedule for both. Test images right for "
        f"one model only: {f['discordant']['only with the shift']} with the shift, "
        f"{f['discordant']['only without']} without (McNemar's exact p = {f['mcnemar_p']:.3g}).",
        markdown_table(acc_rows),
        "A short budget measures how fast each model learns as much as where it ends up: compare the loss curves, "
        "and the full run's longer budget (`zoo lab swin-windows` without `--quick`) for the end state.",
        "## Directions (the accuracy check is not part of the article's claim)", markdown_table(checks),
    ])


def _draw_grid(ax, field: Tensor, window: int, shift: int, token: tuple[int, int], title: str) -> None:
    grid = field.shape[0]
    ax.imshow(field.int().numpy(), cmap="Blues", vmin=0, vmax=1.3)
    for edge in range(0, grid + 1, window):
        ax.axhline(edge - 0.5, color="k", linewidth=1)
        ax.axvline(edge - 0.5, color="k", linewidth=1)
        if shift:
            ax.axhline(edge - 0.5 - shift, color="C3", linewidth=0.8, linestyle="--")
            ax.axvline(edge - 0.5 - shift, color="C3", linewidth=0.8, linestyle="--")
    ax.plot(token[1], token[0], marker="*", color="C1", markersize=12)
    ax.set(xlim=(-0.5, grid - 0.5), ylim=(grid - 0.5, -0.5), xticks=[], yticks=[], title=title)


def _plot_cost(f: dict, path) -> str:
    fig, axes = figure(1, 2, width=5.0, height=3.8)
    left, right = axes[0]
    n = f["tokens"]
    for kind, colour in (("global", "C3"), ("window", "C0")):
        c, e = f["cost"][kind], f["exponents"][kind]
        left.loglog(n, c["kernel_flops"], "o-", color=colour, label=f"{kind} kernel (N^{e['kernel_flops']:.2f})")
        left.loglog(n, c["flops"], "s:", color=colour, label=f"{kind} layer (N^{e['flops']:.2f})")
        right.loglog(n, [1e3 * s for s in c["seconds"]], "o-", color=colour, label=f"{kind} (N^{e['seconds']:.2f})")
    left.set(xlabel="patches N", ylabel="forward FLOPs", title="(a) attention FLOPs")
    right.set(xlabel="patches N", ylabel="ms (median)", title="(a) attention time, forward")
    for ax in (left, right):
        ax.legend(fontsize=8)
    return save(fig, path)


def _plot_fields(fields: dict, path) -> str:
    fig, axes = figure(2, len(FIELD_BLOCKS), width=3.2, height=3.3)
    for row, name in enumerate(("no shift", "shift")):
        for col, k in enumerate(FIELD_BLOCKS):
            field = fields[name][k]
            _draw_grid(axes[row][col], field, FIELD_WINDOW, FIELD_WINDOW // 2 if name == "shift" else 0, FIELD_TOKEN,
                       f"(b) {name}, {k} block{'s' if k > 1 else ''}: {int(field.sum())} patches")
    return save(fig, path)


def _plot_mask(path) -> str:
    resolution, shift = (FIELD_GRID, FIELD_GRID), FIELD_WINDOW // 2
    wrapped = torch.arange(FIELD_GRID) >= FIELD_GRID - shift
    region = (2 * wrapped[:, None] + wrapped[None, :]).int()  # (Hr, Wr): the four regions of the rolled map
    mask = shifted_window_mask(resolution, FIELD_WINDOW, shift)  # (nW, W·W, W·W)
    per_row = FIELD_GRID // FIELD_WINDOW
    fig, axes = figure(1, 3, width=3.8, height=3.6)
    ax = axes[0][0]
    ax.imshow(region.numpy(), cmap="Pastel1", vmin=0, vmax=8)
    for edge in range(0, FIELD_GRID + 1, FIELD_WINDOW):
        ax.axhline(edge - 0.5, color="k", linewidth=1)
        ax.axvline(edge - 0.5, color="k", linewidth=1)
    ax.set(xticks=[], yticks=[], title=f"(c) map rolled by −{shift}: regions by wrap")
    for ax, (name, w) in zip(axes[0][1:], (("right-edge window", per_row - 1), ("corner window", len(mask) - 1))):
        ax.imshow(mask[w].int().numpy(), cmap="Greys_r", vmin=0, vmax=1)
        ax.set(xlabel="key slot", ylabel="query slot",
               title=f"(c) {name}: {mask[w].float().mean():.0%} allowed (white)")
    return save(fig, path)


def _plot_accuracy(f: dict, path) -> str:
    fig, axes = figure(1, 2, width=4.8, height=3.6)
    left, right = axes[0]
    names = ("shift", "no shift")
    for name, colour in zip(names, ("C0", "C3")):
        left.plot(smooth(f["curves"][name], 20), color=colour, label=name)
    left.set(xlabel="step", ylabel="training loss (moving average)", title="(d) training")
    left.legend()
    right.bar(list(names), [100 * f["accuracy"][n] for n in names], color=["C0", "C3"])
    right.set(ylabel="test top-1 (%)", title=f"(d) test top-1, McNemar p = {f['mcnemar_p']:.2g}")
    return save(fig, path)


def run(settings: LabSettings) -> LessonResult:
    """Measure what Swin's windows cost and what the shift buys."""
    sides = cost_sides(settings)
    rounds = max(3, round((9 if settings.quick else 15) * min(settings.scale, 1.0)))
    cost = attention_cost(sides, rounds, seed=settings.seed)
    fields = receptive_fields(settings.seed)
    leak = corner_leak(settings.seed)
    steps = settings.steps(1500, 300)
    runs = train_pair(settings, steps)
    f = _findings(cost, sides, fields, leak, runs, steps)
    figures = [_plot_cost(f, settings.out / "swin_cost.png"), _plot_fields(fields, settings.out / "swin_fields.png"),
               _plot_mask(settings.out / "swin_shift_mask.png"), _plot_accuracy(f, settings.out / "swin_accuracy.png")]
    return LessonResult(_verdict(f), f["holds"], f, _body(f), figures, _verdict(f, "zh"), _body(f, "zh"))


__all__ = ["LESSON_SWIN", "attention_cost", "attention_layer", "corner_leak", "cost_sides", "receptive_field",
           "receptive_fields", "run", "shifts", "unshifted"]

