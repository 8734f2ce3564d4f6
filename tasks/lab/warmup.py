"""Lesson ``warmup``: the paper's Noam warm-up against a constant learning rate of the same peak.

The pitfall. Vaswani et al. (2017, §5.3) raise the learning rate linearly over the first ``warmup_steps`` and then
decay it as 1/√step. Dropping the warm-up and training at the peak from step 1 looks harmless, but the classic
Post-LN model then takes its largest steps while its gradients are least trustworthy: Adam's second-moment
estimate rests on a handful of batches (Liu et al. 2020, "On the Variance of the Adaptive Learning Rate and
Beyond"), and Post-LN's gradients are concentrated in the layers near the output (Xiong et al. 2020, "On Layer
Normalization in the Transformer Architecture"). The first large updates throw those layers off, the lower
layers stop receiving gradient, and the model settles on predicting token frequencies. The warm-up lets the same
model train at a peak where the constant rate fails: it widens the range of usable learning rates.

The switch is the schedule alone: :func:`tasks.lab.toolkit.noam` (warm-up over the first third of the steps,
then 1/√step) or a constant at its peak, on the classic Post-LN model (6 + 6 layers, narrow), one run per peak
and schedule, same seed, data and budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.norm import WIDTH, WORDS_ZH, bounded_bleu, layer_grad_norms, status, unigram_plateau
from tasks.lab.toolkit import (
    Seq2SeqData,
    TrainLog,
    figure,
    noam,
    save,
    small_transformer,
    smooth,
    train,
    translated,
    translation_data,
)

DEPTH = 6  # the paper's 6 + 6 layers
# Found by experiment (d_model 32, Adam β2 0.98, batch 32, clip 1): at 1e-3 both schedules train and the warm-up
# only costs steps; at 3e-3 the warm-up trains better; at 1e-2 the constant rate sticks on the unigram plateau.
PEAKS = (1e-3, 3e-3, 1e-2)
FIRST_STEPS = 40  # "the first steps" whose gradient norms are plotted


@dataclass
class Run:
    """One run: its peak and schedule, the loss log, gradient norms of the first steps, the outcome."""

    peak: float
    warmup: bool
    log: TrainLog
    ratios: list[float]  # per step: last decoder layer's gradient norm over the first's
    bleu: float
    status: str

    @property
    def schedule(self) -> str:
        return "Noam warm-up" if self.warmup else "constant"


def run_one(data: Seq2SeqData, settings: LabSettings, peak: float, warmup: bool, plateau: float, steps: int,
            bleu_rows: int) -> Run:
    """Train the classic Post-LN model at ``peak`` with or without warm-up; record the first steps' gradients."""
    model = small_transformer(data, seed=settings.seed, encoder_layers=DEPTH, decoder_layers=DEPTH, **WIDTH)
    ratios: list[float] = []

    def record(step: int, m: nn.Module) -> None:
        if step < FIRST_STEPS:
            norms = layer_grad_norms(m)  # encoder 1…L, decoder 1…L
            ratios.append(norms[-1] / norms[DEPTH])

    rate = noam(WIDTH["d_model"], max(1, steps // 3), peak) if warmup else peak
    desc = f"peak {peak:g} {'warm-up' if warmup else 'const'}"
    log = train(model, data, steps, lr=rate, seed=settings.seed, progress=settings.progress, desc=desc,
                on_step=record)
    score = bounded_bleu(model, data, bleu_rows) if not log.diverged else 0.0
    return Run(peak, warmup, log, ratios, score, status(log, plateau))


def plot(runs: list[Run], plateau: float, settings: LabSettings) -> str:
    """Per peak: loss curves; learning rate; gradient norm and its last/first-layer ratio over the first steps."""
    fig, axes = figure(4, len(PEAKS), width=4.4, height=2.6)
    for j, peak in enumerate(PEAKS):
        for r in (r for r in runs if r.peak == peak):
            label = f"{r.schedule}: {r.status}"
            axes[0][j].plot(smooth(r.log.loss), label=label)
            axes[1][j].plot(r.log.lr, label=r.schedule)
            axes[2][j].plot(r.log.grad_norm[:FIRST_STEPS], marker=".", label=r.schedule)
            axes[3][j].plot(r.ratios, marker=".", label=r.schedule)
        axes[0][j].axhline(plateau, color="grey", linestyle=":", label="unigram plateau")
        axes[0][j].set(title=f"peak lr {peak:g}: training loss", xlabel="step", ylabel="loss")
        axes[1][j].set(title="learning rate", xlabel="step", ylabel="lr")
        axes[2][j].set(title=f"gradient norm, first {FIRST_STEPS} steps", xlabel="step", ylabel="‖∇‖ (before clip)",
                       yscale="log")
        axes[3][j].set(title="last / first decoder layer ‖∇‖", xlabel="step", ylabel="ratio", yscale="log")
        for ax in axes[:, j]:
            ax.legend(fontsize=7)
    return save(fig, settings.out / "warmup.png")


def _row(r: Run) -> dict:
    return {"peak lr": f"{r.peak:g}", "schedule": r.schedule, "outcome": r.status,
            "final loss": r.log.final(), "greedy BLEU": r.bleu,
            "max ‖∇‖ first steps": max(r.log.grad_norm[:FIRST_STEPS], default=None),
            "last/first layer ‖∇‖, first steps (max)": max(r.ratios, default=None)}


def _body(runs: list[Run], plateau: float, steps: int, lang: str = "en") -> str:
    """The markdown of ``lesson.md`` (``lang`` "zh": of ``lesson.zh.md``): the setting, the table of the runs,
    and why."""
    from plumbing.tables import markdown_table

    if lang == "zh":
        words = {**WORDS_ZH, "peak lr": "峰值学习率", "max ‖∇‖ first steps": "前几步最大 ‖∇‖",
                 "last/first layer ‖∇‖, first steps (max)": "末层/首层 ‖∇‖，前几步（最大值）"}
        return "\n".join([
            "## 对照", "",
            f"经典的 Post-LN 模型（{DEPTH} + {DEPTH} 层，宽度 {WIDTH}），{steps} 步 Adam（批大小 32，梯度裁剪阈值 1），"
            f"种子和数据相同；Noam 调度在 {max(1, steps // 3)} 步内预热到峰值，恒定学习率一直停在峰值。"
            f"*停滞*：最终损失不低于初始值，或落在 unigram 平台上（{plateau:.3f} nats，只按词频预测 token 时的损失）。"
            "梯度范数取裁剪之前的值；*末层/首层*比较解码器最后一层与第一层。", "",
            markdown_table(translated([_row(r) for r in runs], words)), "",
            "## 原因", "",
            "没有预热时，最初的几次更新步子最大，而这时 Adam 的二阶矩估计只基于寥寥几个批次，Post-LN 的梯度又集中在"
            "靠近输出的层；峰值较高时，这几步会把最后几层推偏，下面的层变得沉寂（见末层/首层之比），"
            "loss 停在 unigram 平台上。峰值较低时两种调度都能训练，预热只是多花了几步。Noam 调度在峰值之后还会按 "
            "1/√step 衰减，单这一点就会让正常训练的运行最终损失更低；预热本身的作用，在于一次运行能不能离开这个平台。",
        ])
    return "\n".join([
        "## The contrast", "",
        f"The classic Post-LN model ({DEPTH} + {DEPTH} layers, width {WIDTH}), {steps} Adam steps (batch 32, "
        f"gradient clipping at 1), same seed and data; the Noam schedule warms up over {max(1, steps // 3)} steps "
        "to the peak, the constant rate stays at it. *stuck*: the final loss ends at or above its first value or "
        f"on the unigram plateau ({plateau:.3f} nats, the loss of predicting token frequencies). Gradient norms "
        "are before clipping; *last/first* compares the last decoder layer's with the first's.", "",
        markdown_table([_row(r) for r in runs]), "",
        "## Why", "",
        "Without warm-up the first updates are the largest, taken when Adam's second-moment estimate rests on a "
        "few batches and Post-LN's gradients sit in the layers near the output; at a high peak those updates throw "
        "the last layers off, the lower layers go quiet (the last/first ratio) and the loss settles on the "
        "unigram plateau. At a low peak both schedules train and the warm-up only spends steps. The Noam runs "
        "also decay after the peak (1/√step), which alone lowers the final loss of a run that trains; the warm-up's "
        "own effect is whether a run leaves the plateau at all.",
    ])


def run(settings: LabSettings) -> LessonResult:
    data = translation_data(3000)
    plateau = unigram_plateau(data)
    steps, bleu_rows = settings.steps(600, 200), settings.steps(200, 50)
    runs = [run_one(data, settings, peak, warmup, plateau, steps, bleu_rows)
            for peak in PEAKS for warmup in (False, True)]
    const, warm = [r for r in runs if not r.warmup], [r for r in runs if r.warmup]

    def usable(group: list[Run]) -> list[float]:
        return [r.peak for r in group if r.status == "trains"]

    def shown(peaks: list[float]) -> str:
        return ", ".join(f"{p:g}" for p in peaks) or "none"

    def losses(group: list[Run]) -> str:
        return "/".join(f"{r.log.final():.2f}" for r in group)

    peaks = "/".join(f"{p:g}" for p in PEAKS)
    verdict = (
        f"Constant rate on the Post-LN model, peak {peaks}: final loss {losses(const)} "
        f"({'/'.join(r.status for r in const)}, BLEU {'/'.join(f'{r.bleu:.1f}' for r in const)}); its last decoder "
        f"layer's gradient reaches {max(const[-1].ratios):.3g}× the first's in the first steps at the top peak "
        f"(warm-up: {max(warm[-1].ratios):.3g}×).",
        f"Noam warm-up, same peaks and budget: final loss {losses(warm)} (BLEU "
        f"{'/'.join(f'{r.bleu:.1f}' for r in warm)}); trains at peak {shown(usable(warm))} against "
        f"{shown(usable(const))} without: warm up.",
    )
    verdict_zh = (
        f"Post-LN 模型用恒定学习率，峰值 {peaks}：最终损失 {losses(const)}"
        f"（{'/'.join(WORDS_ZH[r.status] for r in const)}，BLEU {'/'.join(f'{r.bleu:.1f}' for r in const)}）；"
        f"在最高峰值下，最初几步里它解码器最后一层的梯度达到第一层的 {max(const[-1].ratios):.3g}×"
        f"（预热：{max(warm[-1].ratios):.3g}×）。",
        f"Noam 预热，峰值和训练预算相同：最终损失 {losses(warm)}（BLEU {'/'.join(f'{r.bleu:.1f}' for r in warm)}）；"
        f"能正常训练的峰值，有预热：{shown(usable(warm)).replace('none', '无')}；没有预热："
        f"{shown(usable(const)).replace('none', '无')}。所以要做预热。",
    )
    holds = warm[-1].log.final() < const[-1].log.final()  # at the highest peak the warm-up ends lower
    findings = {
        "depth": DEPTH, "width": WIDTH, "steps": steps, "warmup_steps": max(1, steps // 3),
        "unigram_plateau": plateau, "usable_peaks": {"constant": usable(const), "warmup": usable(warm)},
        "runs": {f"{r.peak:g} {r.schedule}": {**_row(r), "grad_norm_first_steps": r.log.grad_norm[:FIRST_STEPS],
                                              "layer_ratio_first_steps": r.ratios} for r in runs},
    }
    return LessonResult(verdict, holds, findings, _body(runs, plateau, steps), [plot(runs, plateau, settings)],
                        verdict_zh, _body(runs, plateau, steps, "zh"))
