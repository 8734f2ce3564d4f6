"""Lesson ``norm``: Post-LN (the paper's) against Pre-LN at depth 6, 12 and 24, with and without warm-up.

The pitfall. Vaswani et al. (2017) put the LayerNorm *after* each residual addition (Post-LN,
``x = LN(x + F(x))``). Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture", show that
at initialisation the gradients of a Post-LN model's parameters are largest in the layers near the output, so a
large learning rate from the first step throws those layers off and training stalls; the learning-rate warm-up
is what makes Post-LN trainable, and the deeper the model the less it helps. Putting the norm in front of the
sublayer (Pre-LN, ``x = x + F(LN(x))``, plus one final LN per stack) keeps the gradients of the same size in
every layer, and the model trains at the same peak without warm-up.

The switch is the public ``TransformerConfig.norm_first`` (``False`` = Post-LN, the classic model); the schedule
is :func:`tasks.lab.toolkit.noam` against a constant rate at the same peak. Twelve runs, same seed, data and
budget: 3 depths (``encoder_layers = decoder_layers``) × 2 placements × 2 schedules. A run *fails* when its loss
becomes NaN/inf, ends at or above its initial value, or ends on the *unigram plateau*: the loss of predicting
target-token frequencies without reading the source or the prefix, where a Post-LN model that failed sits.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import torch
from torch import nn

from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.toolkit import (
    Seq2SeqData,
    TrainLog,
    batch,
    bleu,
    figure,
    noam,
    save,
    sequence_loss,
    small_transformer,
    smooth,
    train,
    translated,
    translation_data,
)

DEPTHS = (6, 12, 24)
PLACEMENTS = {"Post-LN": False, "Pre-LN": True}  # name -> TransformerConfig.norm_first
WIDTH = dict(d_model=32, heads=4, d_ff=64)  # narrow: the cost of 24+24 layers is per-op overhead, not width
# Found by experiment (d_model 32, Adam β2 0.98, batch 32, clip 1): at 3e-3 Post-LN without warm-up still
# trains at depth 6; at 1e-2 it fails at every depth while Pre-LN trains at every depth with either schedule.
PEAK_LR = 1e-2
PLATEAU_MARGIN = 0.1  # nats: a final loss within this of the unigram plateau counts as stuck on it
EARLY_STEPS = 20  # "early in training": per-layer gradient norms averaged over steps 1..20


def layer_grad_norms(model: nn.Module) -> list[float]:
    """L2 norm of the gradient of each layer's parameters: encoder layers 1…L, then decoder layers 1…L."""
    layers = [*model.encoder.layers, *model.decoder.layers]
    return [float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in layer.parameters()
                                                        if p.grad is not None]))) for layer in layers]


def init_grad_norms(model: nn.Module, data: Seq2SeqData, rows: int = 64) -> list[float]:
    """Per-layer gradient norms of the untrained ``model`` on the first ``rows`` training pairs (deterministic)."""
    src, tgt = batch(data, data.pairs["train"][:rows])
    model.zero_grad(set_to_none=True)
    sequence_loss(model, src, tgt, data.tokenizer.pad_id).backward()
    norms = layer_grad_norms(model)
    model.zero_grad(set_to_none=True)
    return norms


def unigram_plateau(data: Seq2SeqData) -> float:
    """Entropy (nats) of the training targets' token frequencies, eos included: the loss of a model that reads
    neither the source nor the target prefix."""
    counts = collections.Counter(tok for _, tgt in data.pairs["train"] for tok in [*tgt, data.tokenizer.eos_id])
    total = sum(counts.values())
    return -sum(n / total * math.log(n / total) for n in counts.values())


def status(log: TrainLog, plateau: float) -> str:
    """``diverged`` (NaN/inf loss), ``stuck`` (ends at/above its first loss or on the unigram plateau), ``trains``."""
    if log.diverged:
        return "diverged"
    final = log.final()
    return "stuck" if final >= log.loss[0] or final >= plateau - PLATEAU_MARGIN else "trains"


def bounded_bleu(model: nn.Module, data: Seq2SeqData, limit: int) -> float:
    """Greedy BLEU on the first ``limit`` test pairs, decoding at most twice the longest training sentence, so
    that a model that never emits eos costs no more than one that does."""
    return bleu(model, data, "test", limit, max_len=2 * data.longest_train + 2)["bleu"]


@dataclass
class Run:
    """One training run: its setting, per-layer gradient norms at init and early on, loss log, outcome."""

    placement: str
    depth: int
    warmup: bool
    steps: int
    init_grads: list[float]
    early_grads: list[float]
    log: TrainLog
    bleu: float
    status: str

    @property
    def key(self) -> str:
        return f"{self.placement} depth {self.depth} {'warm-up' if self.warmup else 'constant'}"

    @property
    def ratio(self) -> float:
        """Gradient norm of the last decoder layer over the first, at initialisation (>1: larger near the output)."""
        return self.init_grads[-1] / self.init_grads[self.depth]

    @property
    def early_ratio(self) -> float:
        """The same ratio, averaged gradient norms of steps 1…EARLY_STEPS (≫ ratio: the lower layers went quiet)."""
        return self.early_grads[-1] / self.early_grads[self.depth]


def budget(settings: LabSettings, depth: int) -> int:
    """Training steps of every run at ``depth``. ``--quick`` gives deeper models fewer steps (a depth-24 step costs
    about four depth-6 steps); the runs of one depth still share one budget, and Pre-LN leaves the plateau within
    30 steps even at depth 24."""
    return settings.steps(300, 50 if depth <= 6 else 40 if depth <= 12 else 30)


def run_one(data: Seq2SeqData, settings: LabSettings, placement: str, depth: int, warmup: bool, plateau: float,
            bleu_rows: int) -> Run:
    """Build, measure at init, train for ``steps`` (Noam warm-up over a third of them, or constant), evaluate."""
    model = small_transformer(data, seed=settings.seed, encoder_layers=depth, decoder_layers=depth,
                              norm_first=PLACEMENTS[placement], **WIDTH)
    init = init_grad_norms(model, data)
    steps = budget(settings, depth)
    early: list[list[float]] = []

    def record(step: int, m: nn.Module) -> None:
        if 1 <= step <= EARLY_STEPS:
            early.append(layer_grad_norms(m))

    rate = noam(WIDTH["d_model"], max(1, steps // 3), PEAK_LR) if warmup else PEAK_LR
    desc = f"{placement} d{depth} {'warm-up' if warmup else 'const'}"
    log = train(model, data, steps, lr=rate, seed=settings.seed, progress=settings.progress, desc=desc,
                on_step=record)
    early_mean = [sum(col) / len(col) for col in zip(*early)] if early else init
    score = bounded_bleu(model, data, bleu_rows) if not log.diverged else 0.0
    return Run(placement, depth, warmup, steps, init, early_mean, log, score, status(log, plateau))


def _by_depth(runs: list[Run], placement: str, warmup: bool) -> list[Run]:
    return [r for r in runs if r.placement == placement and r.warmup == warmup]


def _outcomes(runs: list[Run], lang: str = "en") -> str:
    """``stuck/stuck/trains (loss 3.82/3.80/2.10)`` over the depths (``lang`` "zh": the outcomes in Chinese)."""
    words = WORDS_ZH if lang == "zh" else {}
    outcomes = "/".join(words.get(r.status, r.status) for r in runs)
    losses = "/".join(f"{r.log.final():.2f}" for r in runs)
    return f"{outcomes}（loss {losses}）" if lang == "zh" else f"{outcomes} (loss {losses})"


def _ratios(runs: list[Run]) -> str:
    return "/".join(f"{r.ratio:.2g}" for r in runs)


def plot_losses(runs: list[Run], plateau: float, settings: LabSettings) -> str:
    """Loss curves, one panel per depth and placement, both schedules, with the unigram plateau."""
    fig, axes = figure(len(DEPTHS), len(PLACEMENTS), width=4.6, height=2.6)
    for i, depth in enumerate(DEPTHS):
        for j, placement in enumerate(PLACEMENTS):
            ax = axes[i][j]
            for r in runs:
                if r.depth == depth and r.placement == placement:
                    ax.plot(smooth(r.log.loss), label=f"{'Noam warm-up' if r.warmup else 'constant'}: {r.status}")
            ax.axhline(plateau, color="grey", linestyle=":", label="unigram plateau")
            ax.set(title=f"{placement}, depth {depth}", xlabel="step", ylabel="training loss")
            ax.legend(fontsize=7)
    return save(fig, settings.out / "norm_loss.png")


def plot_grads(runs: list[Run], settings: LabSettings) -> str:
    """Per depth: gradient norm by layer at init (top) and averaged over the first steps (bottom), log scale."""
    fig, axes = figure(2, len(DEPTHS), width=4.4, height=3.0)
    colours = {"Post-LN": "C0", "Pre-LN": "C1"}
    for j, depth in enumerate(DEPTHS):
        for r in (r for r in runs if r.depth == depth):
            style = dict(color=colours[r.placement], linestyle="--" if r.warmup else "-", marker=".")
            label = f"{r.placement}, {'warm-up' if r.warmup else 'constant'}"
            # Encoder and decoder drawn apart: the decoder's first layer does not follow the encoder's last.
            for grads, ax, name in ((r.init_grads, axes[0][j], r.placement), (r.early_grads, axes[1][j], label)):
                if ax is axes[0][j] and r.warmup:
                    continue  # the initial gradients do not depend on the schedule: draw them once
                ax.plot(range(1, depth + 1), grads[:depth], label=name, **style)
                ax.plot(range(depth + 1, 2 * depth + 1), grads[depth:], **style)
        for i, when in enumerate(("at initialisation", f"mean of steps 1–{EARLY_STEPS}")):
            ax = axes[i][j]
            ax.axvline(depth + 0.5, color="grey", linestyle=":")  # encoder | decoder
            ax.set(yscale="log", title=f"depth {depth}: gradient norm {when}", xlabel="layer (encoder | decoder)",
                   ylabel="‖∇ layer‖")
            ax.legend(fontsize=7)
    return save(fig, settings.out / "norm_grads.png")


def findings_of(runs: list[Run], plateau: float) -> dict:
    """Every measured number, JSON-ready (``result.json``)."""
    return {
        "peak_lr": PEAK_LR, "width": WIDTH, "unigram_plateau": plateau, "plateau_margin": PLATEAU_MARGIN,
        "early_steps": EARLY_STEPS,
        "runs": {r.key: {"placement": r.placement, "depth": r.depth, "warmup": r.warmup, "steps": r.steps,
                         "warmup_steps": max(1, r.steps // 3) if r.warmup else 0, "status": r.status,
                         "initial_loss": r.log.loss[0] if r.log.loss else math.nan, "final_loss": r.log.final(),
                         "bleu": r.bleu, "max_grad_norm": max(r.log.grad_norm, default=math.nan),
                         "init_grad_ratio": r.ratio, "early_grad_ratio": r.early_ratio,
                         "early_grads": r.early_grads} for r in runs},
        "init_grads": {p: {str(r.depth): r.init_grads for r in _by_depth(runs, p, False)} for p in PLACEMENTS},
        "init_grad_ratio": {p: {str(r.depth): r.ratio for r in _by_depth(runs, p, False)} for p in PLACEMENTS},
    }


# The Chinese of the table's headings and words, and of the runs' outcomes (shared with warmup's page).
WORDS_ZH = {"norm": "归一化位置", "depth": "层数", "schedule": "学习率调度", "steps": "步数", "outcome": "结果",
            "first loss": "初始损失", "final loss": "最终损失", "greedy BLEU": "贪心解码 BLEU",
            "last/first decoder ‖∇‖ at init": "初始化时解码器末层/首层 ‖∇‖", "Noam warm-up": "Noam 预热",
            "constant": "恒定", "stuck": "停滞", "trains": "正常训练", "diverged": "发散"}


def body_of(runs: list[Run], plateau: float, lang: str = "en") -> str:
    """The markdown of ``lesson.md`` (``lang`` "zh": of ``lesson.zh.md``): the setting, the table of the 12 runs,
    and why."""
    from plumbing.tables import markdown_table

    rows = [{"norm": r.placement, "depth": r.depth, "schedule": "Noam warm-up" if r.warmup else "constant",
             "steps": r.steps, "outcome": r.status, "first loss": r.log.loss[0] if r.log.loss else None,
             "final loss": r.log.final(), "greedy BLEU": r.bleu, "max ‖∇‖": max(r.log.grad_norm, default=None),
             "last/first decoder ‖∇‖ at init": r.ratio, f"… steps 1–{EARLY_STEPS}": r.early_ratio} for r in runs]
    if lang == "zh":
        words = {**WORDS_ZH, f"… steps 1–{EARLY_STEPS}": f"… 第 1–{EARLY_STEPS} 步"}
        return "\n".join([
            "## 对照", "",
            "同一层数的每次运行都用相同的种子、数据和训练预算：Adam（批大小 32，梯度裁剪阈值 1），"
            f"峰值学习率 {PEAK_LR:g}，"
            f"或者恒定，或者在前三分之一的步数里做 Noam 预热；模型宽度 {WIDTH}，编码器和解码器的层数见表。"
            f"最终损失（最后 10 步的均值）不低于初始损失、或与 unigram 平台相差不到 {PLATEAU_MARGIN} nats 时，"
            f"记为*停滞*（{plateau:.3f} nats：不看源句、也不看前缀，只按词频预测 token 时的损失）。"
            "梯度范数按每层参数计算，取裁剪之前的值；*末层/首层*比较解码器最后一层与第一层。", "",
            markdown_table(translated(rows, words)), "",
            "## 原因", "",
            "初始化时，Post-LN 模型的梯度越靠近输出越大，层数越多越明显：最初几次更新步子一大，就把最后几层推偏，"
            f"下面的层几乎收不到梯度（*第 1–{EARLY_STEPS} 步*一列），模型停在 unigram 平台上。预热让最初几步保持很小，"
            "等 Adam 的统计量稳定下来。Pre-LN 从每一层到输出都保留了一条恒等路径，各层梯度大小相近，"
            "因此不用预热也能在同样的峰值下训练（Xiong et al. 2020, \"On Layer Normalization in the Transformer "
            "Architecture\"）。Noam 调度在峰值之后还会按 1/√step 衰减，单这一点就会让正常训练的运行最终损失更低；"
            "预热本身的作用，在于一次运行能不能离开这个平台。",
        ])
    return "\n".join([
        "## The contrast", "",
        f"Same seed, data and budget for every run of one depth: Adam (batch 32, gradient clipping at 1) at peak "
        f"learning rate {PEAK_LR:g}, either constant or with the Noam warm-up over the first third of the steps; "
        f"model width {WIDTH}, encoder and decoder depth as listed. A run is *stuck* when its final loss (mean of "
        f"the last 10 steps) is at or above its first loss or within {PLATEAU_MARGIN} nats of the unigram plateau "
        f"({plateau:.3f} nats: the loss of predicting token frequencies without reading the source or the prefix). "
        "Gradient norms are of each layer's parameters, before clipping; *last/first* compares the last decoder "
        "layer with the first.", "",
        markdown_table(rows), "",
        "## Why", "",
        "At initialisation a Post-LN model's gradients grow towards the output, and more so the deeper it is: a "
        "large step in the first updates throws the last layers off, the lower layers stop receiving gradient "
        "(column *steps 1–20*) and the model settles on the unigram plateau. The warm-up keeps the first steps "
        "small while Adam's statistics settle. Pre-LN leaves an identity path from every layer to the output, so "
        "its gradients are about the same in every layer and it trains at the same peak without warm-up (Xiong et "
        "al. 2020, \"On Layer Normalization in the Transformer Architecture\"). The Noam runs also decay after "
        "the peak (1/√step), which alone lowers the final loss of a run that trains; the warm-up's own effect is "
        "whether a run leaves the plateau at all.",
    ])


def run(settings: LabSettings) -> LessonResult:
    data = translation_data(3000)
    plateau = unigram_plateau(data)
    bleu_rows = settings.steps(200, 50)
    runs = [run_one(data, settings, placement, depth, warmup, plateau, bleu_rows)
            for depth in DEPTHS for placement in PLACEMENTS for warmup in (False, True)]
    post, pre = _by_depth(runs, "Post-LN", False), _by_depth(runs, "Pre-LN", False)
    post_wu, pre_wu = _by_depth(runs, "Post-LN", True), _by_depth(runs, "Pre-LN", True)
    depths = "/".join(map(str, DEPTHS))
    rescued = ", ".join(str(b.depth) for a, b in zip(post, post_wu) if a.status != "trains" and b.status == "trains")
    verdict = (
        f"Post-LN (the paper's) at peak lr {PEAK_LR:g}, depth {depths}: constant rate {_outcomes(post)}, Noam "
        f"warm-up {_outcomes(post_wu)}; at init its last decoder layer's gradient is {_ratios(post)}× its first's.",
        f"Pre-LN: constant rate {_outcomes(pre)}, warm-up {_outcomes(pre_wu)} (gradient last/first "
        f"{_ratios(pre)}×); warm-up rescues Post-LN at depth {rescued or 'none'}: put the norm first for deep stacks.",
    )
    verdict_zh = (
        f"Post-LN（论文的做法）在峰值学习率 {PEAK_LR:g}、层数 {depths} 下：恒定学习率 {_outcomes(post, 'zh')}，"
        f"Noam 预热 {_outcomes(post_wu, 'zh')}；初始化时其解码器最后一层的梯度是第一层的 {_ratios(post)}×。",
        f"Pre-LN：恒定学习率 {_outcomes(pre, 'zh')}，预热 {_outcomes(pre_wu, 'zh')}（梯度末层/首层 {_ratios(pre)}×）；"
        f"预热在层数 {rescued or '（无）'} 时救回了 Post-LN：堆得深时，把层归一化放在前面。",
    )
    # The init ratios are deterministic, and the deepest constant-rate runs part within a few steps (Post-LN sticks
    # at once), so the direction holds at the tests' tiny budgets too; the stuck/trains outcomes need the budget.
    holds = all(a.ratio > b.ratio for a, b in zip(post, pre)) and pre[-1].log.final() < post[-1].log.final()
    figures = [plot_losses(runs, plateau, settings), plot_grads(runs, settings)]
    return LessonResult(verdict, holds, findings_of(runs, plateau), body_of(runs, plateau), figures,
                        verdict_zh, body_of(runs, plateau, "zh"))
