"""Lesson ``init``: Q/K/V projections initialised with too large a variance saturate attention.

The article's debugging case: a model whose loss stalls high from the first steps, with attention maps that are
almost one-hot. The cause is the initialisation of W^Q, W^K, W^V: drawn from N(0, 1) instead of a
fan-in-aware scale, each query and key component has a variance of about d_model·Var(x), so the scores
q·k/√d_k have a variance of order d_model² even *with* the 1/√d_k scale (Vaswani et al. 2017, §3.2.1, argue for
that scale assuming unit-variance q and k). The softmax saturates at step 0, passes almost no gradient to the
scores, and training plateaus. The fix is the variance the core already uses: Glorot/Xavier uniform on the packed
``qkv`` weight (``init_weights(model, "xavier")``, std √(2/(fan_in + fan_out)), the core default), or N(0, 0.02²)
as in BERT/GPT-2.

The mistake is :func:`reinit_qkv` with std 1.0 applied to every ``MultiHeadAttention.qkv`` of a model built by the
core; the same function with std 0.02 gives the second fix. All three start from the same seed and train on the same
batches for the same budget.
"""

from __future__ import annotations

import torch
from torch import nn

from core.multihead import MultiHeadAttention
from plumbing.tables import markdown_table
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.scale import ProbedRun, probe_batch, train_probed
from tasks.lab.toolkit import bleu, figure, noam, save, small_transformer, smooth, translated, translation_data

HEADS = 2
MISTAKE = "std 1.0"
# name -> std of the re-initialised qkv weight; None keeps the core's Xavier initialisation.
INITS: dict[str, float | None] = {MISTAKE: 1.0, "std 0.02": 0.02, "xavier (core)": None}
COLOURS = {MISTAKE: "C3", "std 0.02": "C2", "xavier (core)": "C0"}


@torch.no_grad()
def reinit_qkv(model: nn.Module, std: float, seed: int = 0) -> nn.Module:
    """Redraw the packed [W^Q; W^K; W^V] weight of every multi-head attention from N(0, std²) (biases untouched)."""
    gen = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.qkv.weight.normal_(0.0, std, generator=gen)
    return model


def _plot(runs: dict[str, ProbedRun], path) -> str:
    fig, axes = figure(2, 2, width=5.0, height=3.3)
    for name, run in runs.items():
        colour = COLOURS[name]
        axes[0][0].plot(smooth(run.log.loss, 20), color=colour, label=name)
        axes[0][1].plot(smooth(run.qk_grad, 20), color=colour, label=name)
        axes[1][0].plot(run.probe_steps, [p["entropy"] for p in run.probes], "o-", color=colour, label=name)
        axes[1][1].plot(run.probe_steps, [p["saturation"] for p in run.probes], "o-", color=colour, label=name)
    axes[0][0].set(yscale="log", xlabel="step", title="training loss (moving average)")
    axes[0][1].set(yscale="log", xlabel="step", title="‖∇W^Q, ∇W^K‖ (moving average)")
    axes[1][0].set(xlabel="step", title="attention entropy (nats), held out")
    axes[1][1].set(xlabel="step", title="saturated rows (max weight > 0.99), held out")
    for row in axes:
        for ax in row:
            ax.legend()
    return save(fig, path)


def run(settings: LabSettings) -> LessonResult:
    """Train the same model from a too-wide Q/K/V initialisation and from the two fixes, same seed and batches."""
    d_model = 64 if settings.quick else 128
    steps = settings.steps(1000, 300)
    bleu_limit = max(10, round(100 * min(settings.scale, 1.0)))  # reduced runs decode fewer sentences
    data = translation_data(3000, seed=settings.seed)
    probe = probe_batch(data)
    runs: dict[str, ProbedRun] = {}
    findings: dict = {"d_model": d_model, "heads": HEADS, "steps": steps}
    for name, std in INITS.items():
        model = small_transformer(data, seed=settings.seed, d_model=d_model, heads=HEADS, d_ff=2 * d_model)
        if std is not None:
            reinit_qkv(model, std, settings.seed)
        runs[name] = r = train_probed(model, data, steps, settings, f"qkv {name}", probe,
                                      noam(d_model, max(1, steps // 8), 1e-3))
        drawn = float(model.encoder.layers[0].self_attn.qkv.weight.detach().std()) if std is None else std
        findings[name] = {"qkv_std": drawn,
                          "final_loss": r.log.final(20), "diverged": r.log.diverged,
                          **{f"{key}_init": value for key, value in r.probes[0].items()}, **r.probes[-1],
                          "qk_grad_norm_mean": sum(r.qk_grad) / max(1, len(r.qk_grad)),
                          **bleu(model, data, "test", limit=bleu_limit)}
    figures = [_plot(runs, settings.out / "init_training.png")]
    findings["loss_curves"] = {name: r.log.loss for name, r in runs.items()}

    bad, fixes = findings[MISTAKE], [findings[name] for name in INITS if name != MISTAKE]
    holds = all(bad["saturation_init"] > f["saturation_init"] and bad["entropy_init"] < f["entropy_init"]
                and bad["final_loss"] > f["final_loss"] for f in fixes)
    table = [{"qkv init": name, "std": f["qkv_std"], "entropy step 0": f["entropy_init"],
              "saturated step 0": f["saturation_init"], "entropy trained": f["entropy"],
              "saturated trained": f["saturation"], "final loss": f["final_loss"], "test BLEU": f["bleu"]}
             for name, f in ((name, findings[name]) for name in INITS)]
    (verdict, body), (verdict_zh, body_zh) = (_text(findings, table, settings.seed, lang) for lang in ("en", "zh"))
    return LessonResult(verdict, holds, findings, body, figures, verdict_zh, body_zh)


# The Chinese of the table's headings (the notes are written per language in _text).
WORDS_ZH = {"qkv init": "qkv 初始化", "entropy step 0": "第 0 步的熵", "saturated step 0": "第 0 步的饱和比例",
            "entropy trained": "训练后的熵", "saturated trained": "训练后的饱和比例", "final loss": "最终损失",
            "test BLEU": "测试集 BLEU"}


def _text(findings: dict, table: list[dict], seed: int, lang: str) -> tuple[tuple[str, str], str]:
    """The verdict and the body in ``lang`` ("en" or "zh") from the same numbers (``table``: English headings)."""
    bad, std_fix, xavier = findings[MISTAKE], findings["std 0.02"], findings["xavier (core)"]
    d_model, steps = findings["d_model"], findings["steps"]
    if lang == "zh":
        verdict = (
            f"Q/K/V 以 std 1.0 初始化：第 0 步就有 {bad['saturation_init']:.0%} 的注意力行饱和（熵 "
            f"{bad['entropy_init']:.2f} nats，Xavier 为 {xavier['entropy_init']:.2f}，std 0.02 为 "
            f"{std_fix['entropy_init']:.2f}），训练 {steps} 步后仍有 {bad['saturation']:.0%}：loss 停在 "
            f"{bad['final_loss']:.2f}。",
            f"核心库自带的初始化就能解决：loss {xavier['final_loss']:.3f}（Xavier）/ {std_fix['final_loss']:.3f}"
            f"（std 0.02），测试集 BLEU {xavier['bleu']:.1f} / {std_fix['bleu']:.1f}，而出错的是 {bad['bleu']:.1f}；"
            "种子、批次和训练预算都相同。",
        )
        body = "\n\n".join([
            f"## 同一个模型（d_model {d_model}，{HEADS} 个头），种子 {seed}，{steps} 步，批次相同",
            markdown_table(translated(table, WORDS_ZH)),
            "各行之间只有打包的 `qkv` 权重不同（Xavier 一行保留核心库的初始化）。"
            "熵和饱和比例是在一个留出批次上对所有注意力图取的平均。",
        ])
        return verdict, body
    verdict = (
        f"Q/K/V drawn with std 1.0: {bad['saturation_init']:.0%} of attention rows saturated at step 0 (entropy "
        f"{bad['entropy_init']:.2f} nats vs {xavier['entropy_init']:.2f} with Xavier, {std_fix['entropy_init']:.2f} "
        f"with std 0.02) and {bad['saturation']:.0%} still after {steps} steps: the loss stalls at "
        f"{bad['final_loss']:.2f}.",
        f"The core's initialisation fixes it: loss {xavier['final_loss']:.3f} (Xavier) / {std_fix['final_loss']:.3f} "
        f"(std 0.02), test BLEU {xavier['bleu']:.1f} / {std_fix['bleu']:.1f} vs {bad['bleu']:.1f}; same seed, "
        f"batches and budget.",
    )
    body = "\n\n".join([
        f"## Same model (d_model {d_model}, {HEADS} heads), seed {seed}, {steps} steps, same batches",
        markdown_table(table),
        "Only the packed `qkv` weight differs between the rows (the Xavier row keeps the core's initialisation). "
        "Entropy and saturation are averaged over every attention map on a held-out batch.",
    ])
    return verdict, body
