"""Lesson ``exposure-bias``: teacher forcing in training, free running at inference, and scheduled sampling.

A decoder is trained with teacher forcing: at every position it reads the *reference* prefix and predicts the
next token. At inference nobody hands it the reference: greedy decoding feeds back its own predictions, so the
first wrong token puts it on a prefix it never saw in training, and its later predictions are conditioned on
its own mistake (Ranzato et al. 2016 named this *exposure bias*). The teacher-forced loss and token accuracy
are therefore an optimistic view of what the model does when it runs free, and the optimism grows along the
sequence: at position t the greedy output is right only if it stayed on track, and the share still on track
is a product over the earlier positions.

The lesson trains one small Transformer on the embedded corpus at ``medium`` difficulty (clauses and
prepositional phrases make sentences long enough for errors to compound) and, every few steps, measures on
held-out sentences (a) teacher-forced loss and token accuracy, (b) greedy decoding's BLEU, exact match and
positional token accuracy (its token at t against the reference's token at t), each per output position t.

The mitigation is scheduled sampling (Bengio et al. 2015) in the two-pass form for Transformers (Mihaylova &
Martins 2019): a first, teacher-forced pass without gradient predicts every position; each decoder input
token (after BOS) is then replaced by the model's own arg-max prediction for it with probability p, and the
loss is taken on a second pass over that mixed input, against the reference. p rises over training
(:func:`mix_probability`). It is :class:`ScheduledSampling`, a wrapper the lab puts around an unchanged
model, trained on the same seed, batches and budget as the teacher-forced baseline; it is no option of core.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.decoding import greedy_decode, strip_special
from core.model import Transformer
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.toolkit import (
    Seq2SeqData,
    batch,
    figure,
    noam,
    save,
    small_transformer,
    train,
    translated,
    translation_data,
)

DIFFICULTY = "medium"  # "easy" sentences (≤ 9 target tokens) are learnt almost perfectly: nothing to compound
P_MAX = 0.25  # the largest share of decoder inputs scheduled sampling replaces by the model's own predictions
MIN_COUNT = 20  # a position is reported only where at least this many held-out references reach it


def mix_probability(step: int, steps: int, p_max: float = P_MAX, start: float = 0.25) -> float:
    """Scheduled sampling's p at ``step`` of ``steps``: 0 for the first ``start`` share of training (the model's
    guesses are noise at first), then rising linearly to ``p_max`` at the last step.

    Bengio et al. decay the teacher-forcing probability ε = 1 − p; a linear decay is one of their three schedules.
    """
    if not 0.0 <= p_max <= 1.0:
        raise ValueError(f"p_max={p_max} is not a probability; choose a value in [0, 1]")
    if not 0.0 <= start < 1.0:
        raise ValueError(f"start={start} must be in [0, 1): the share of training before mixing begins")
    first = start * (steps - 1)  # the step where mixing begins
    return p_max * min(1.0, max(0.0, (step - first) / max(1.0, steps - 1 - first)))


class ScheduledSampling(nn.Module):
    """Scheduled sampling with a two-pass decoder around an unchanged ``model``: ``forward(src, tgt_in)`` -> logits.

    In training mode, a no-grad teacher-forced pass gives the model's arg-max prediction for every position;
    each decoder input after BOS is replaced by the prediction made for it (the output at the previous position)
    with probability ``schedule(step)``, and the returned logits come from a second pass over the mixed input.
    In eval mode (and while p = 0) it is the plain teacher-forced forward. ``step`` is advanced by the caller.

    Args:
        model: the encoder–decoder; its parameters are this module's parameters (one optimizer serves both).
        schedule: step -> probability of using the model's own token at a position.
        seed: of the generator that draws which positions are replaced (it leaves the global RNG alone).

    Shape:
        src ``(B, S)``, tgt_in ``(B, T)`` (BOS + reference, padded) -> ``(B, T, V)``.
    """

    def __init__(self, model: Transformer, schedule: Callable[[int], float], seed: int = 0) -> None:
        super().__init__()
        self.model, self.schedule, self.step = model, schedule, 0
        self.generator = torch.Generator().manual_seed(seed)
        self.replaced: list[float] = []  # share of real decoder inputs replaced, per training forward

    def mix(self, src: Tensor, tgt_in: Tensor, p: float) -> Tensor:
        """``tgt_in`` with each token after BOS swapped, with probability ``p``, for the model's own guess of it."""
        pad = self.model.config.pad_id
        with torch.no_grad():
            guess = self.model(src, tgt_in).argmax(-1)  # (B, T): prediction for input position t + 1
        own = torch.cat((tgt_in[:, :1], guess[:, :-1]), dim=1)  # (B, T): the model's guess for input t
        draw = torch.rand(tgt_in.shape, generator=self.generator) < p  # (B, T)
        # never BOS, never a padding slot, and never a predicted pad (it would be masked as padding)
        swap = draw & (tgt_in != pad) & (own != pad)
        swap[:, 0] = False
        self.replaced.append(float(swap.sum() / (tgt_in != pad)[:, 1:].sum().clamp_min(1)))
        return torch.where(swap, own, tgt_in)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        p = self.schedule(self.step) if self.training else 0.0
        if p > 0.0:
            tgt_in = self.mix(src, tgt_in, p)
        return self.model(src, tgt_in)  # (B, T, V)


# --- measuring teacher-forced vs free-running quality, per position ----------------------------------------
@dataclass
class Checkpoint:
    """Held-out scores of one model state. Per-position lists count output positions t = 0, 1, … (EOS included)."""

    step: int
    tf_loss: float
    tf_accuracy: float
    greedy_accuracy: float
    bleu: float
    exact_match: float
    tf_correct: list[int] = field(default_factory=list)
    greedy_correct: list[int] = field(default_factory=list)
    on_track: list[int] = field(default_factory=list)  # greedy output equal to the reference up to and with t
    count: list[int] = field(default_factory=list)  # references whose length (with EOS) exceeds t

    def per_position(self, min_count: int = MIN_COUNT) -> list[dict[str, float]]:
        """Accuracies per position t where at least ``min_count`` references reach t."""
        return [{"position": t, "references": n, "teacher_forced": tf / n, "greedy": g / n, "on_track": k / n}
                for t, (tf, g, k, n) in enumerate(zip(self.tf_correct, self.greedy_correct, self.on_track,
                                                      self.count)) if n >= min_count]


def _counts(hit: Tensor, valid: Tensor) -> list[int]:
    """Per-position sums ``(T,)`` of ``hit & valid`` ``(B, T)`` as a list."""
    return (hit & valid).sum(0).tolist()


@torch.no_grad()
def evaluate(model: Transformer, data: Seq2SeqData, rows: Sequence[tuple[list[int], list[int]]],
             step: int) -> Checkpoint:
    """Teacher-forced and greedy scores of ``model`` on ``rows`` (restores its train/eval mode)."""
    from tasks.translation.metrics import translation_metrics

    was_training = model.training
    model.eval()
    tok = data.tokenizer
    src, tgt = batch(data, rows)  # (B, S), (B, T + 1) with BOS … EOS
    gold = tgt[:, 1:]  # (B, T): what each output position should say, EOS included
    valid = gold != tok.pad_id
    logits = model(src, tgt[:, :-1])  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), gold.flatten(), ignore_index=tok.pad_id)
    tf_hit = logits.argmax(-1) == gold
    out = greedy_decode(model, src, max_len=gold.shape[1] + 8)  # (B, L); a run-on past the reference is wrong anyway
    free = torch.full_like(gold, tok.pad_id)
    free[:, : min(out.shape[1], gold.shape[1])] = out[:, : gold.shape[1]]  # (B, T), pad where it stopped early
    greedy_hit = free == gold
    on_track = (greedy_hit | ~valid).cumprod(1).bool()  # (B, T)
    hyps = [tok.decode(seq) for seq in strip_special(out, tok.eos_id, tok.pad_id)]
    refs = [tok.decode(t) for _, t in rows]
    scores = translation_metrics(hyps, refs)
    model.train(was_training)
    n = valid.sum()
    return Checkpoint(step, float(loss), float((tf_hit & valid).sum() / n), float((greedy_hit & valid).sum() / n),
                      scores["bleu"], scores["exact_match"], _counts(tf_hit, valid), _counts(greedy_hit, valid),
                      _counts(on_track, valid), valid.sum(0).tolist())


@dataclass
class Run:
    """One training run: its per-step loss, p per step, and the held-out checkpoints."""

    name: str
    loss: list[float]
    p: list[float]
    checkpoints: list[Checkpoint]
    replaced: float = 0.0  # share of real decoder inputs scheduled sampling replaced, mean of its last 20 steps

    @property
    def final(self) -> Checkpoint:
        return self.checkpoints[-1]


def train_run(name: str, data: Seq2SeqData, settings: LabSettings, steps: int, every: int, held_out: Sequence,
              schedule: Callable[[int], float] | None, d_model: int) -> Run:
    """Train a fresh model (seed, batches and schedule fixed by ``settings``) with teacher forcing
    (``schedule=None``) or scheduled sampling, evaluating on ``held_out`` every ``every`` steps and at the end."""
    model = small_transformer(data, seed=settings.seed, d_model=d_model, heads=4, d_ff=2 * d_model)
    trained: nn.Module = model if schedule is None else ScheduledSampling(model, schedule, settings.seed)
    checkpoints: list[Checkpoint] = []
    p: list[float] = []

    def on_step(step: int, _module: nn.Module) -> None:  # after backward, before the update of ``step``
        p.append(0.0 if schedule is None else schedule(step))
        if step % every == 0:
            checkpoints.append(evaluate(model, data, held_out, step))
        if isinstance(trained, ScheduledSampling):
            trained.step = step + 1

    log = train(trained, data, steps, lr=noam(d_model, max(1, steps // 10), 2e-3), seed=settings.seed,
                progress=settings.progress, desc=name, on_step=on_step)
    checkpoints.append(evaluate(model, data, held_out, len(log.loss)))
    shares = getattr(trained, "replaced", [])
    return Run(name, log.loss, p, checkpoints, statistics.fmean(shares[-20:]) if shares else 0.0)


# --- the lesson ------------------------------------------------------------------------------------------
def stages(rows: list[dict[str, float]], early: int = 3) -> dict[str, dict[str, float]]:
    """Mean per-position accuracies over the first ``early`` positions and over the last third of ``rows``
    (at least ``early`` positions), with the teacher-forced minus greedy ``gap`` of each."""
    late = max(early, len(rows) // 3)
    out = {}
    for name, part in (("early", rows[:early]), ("late", rows[-late:])):
        means = {key: statistics.fmean(r[key] for r in part) for key in ("teacher_forced", "greedy", "on_track")}
        out[name] = {**means, "gap": means["teacher_forced"] - means["greedy"],
                     "positions": f"{part[0]['position']}–{part[-1]['position']}"}
    return out


def _summary(run: Run) -> dict:
    c = run.final
    rows = c.per_position()
    return {"tf_loss": c.tf_loss, "tf_accuracy": c.tf_accuracy, "greedy_accuracy": c.greedy_accuracy,
            "bleu": c.bleu, "exact_match": c.exact_match, "stages": stages(rows), "per_position": rows,
            "final_train_loss": statistics.fmean(run.loss[-20:]), "p_final": run.p[-1] if run.p else 0.0,
            "curve": [{"step": k.step, "tf_loss": k.tf_loss, "tf_accuracy": k.tf_accuracy,
                       "greedy_accuracy": k.greedy_accuracy, "bleu": k.bleu, "exact_match": k.exact_match}
                      for k in run.checkpoints]}


def findings_of(runs: dict[str, Run], steps: int, held_out: int) -> dict:
    """The lesson's numbers, the direction checks and whether the mitigation helped (from the numbers only)."""
    tf, ss = _summary(runs["teacher forcing"]), _summary(runs["scheduled sampling"])
    early, late = tf["stages"]["early"], tf["stages"]["late"]
    checks = {"greedy_below_teacher_forced": tf["greedy_accuracy"] < tf["tf_accuracy"],
              "gap_grows_with_position": late["gap"] > early["gap"],
              "teacher_forced_stays_flatter": (early["teacher_forced"] - late["teacher_forced"])
              < (early["greedy"] - late["greedy"])}
    # one seed: call it an effect only when BLEU (≥ 1) and greedy token accuracy (≥ 1 point) agree
    gain, accuracy_gain = ss["bleu"] - tf["bleu"], ss["greedy_accuracy"] - tf["greedy_accuracy"]
    effect = ("helped" if gain >= 1.0 and accuracy_gain >= 0.01 else
              "hurt" if gain <= -1.0 and accuracy_gain <= -0.01 else "made no clear difference")
    return {"steps": steps, "held_out": held_out, "difficulty": DIFFICULTY, "p_max": P_MAX,
            "replaced_share_last_steps": runs["scheduled sampling"].replaced, "teacher_forcing": tf,
            "scheduled_sampling": ss,
            "checks": checks, "holds": all(checks.values()), "bleu_gain": gain,
            "greedy_accuracy_gain": accuracy_gain, "mitigation": effect}


# The Chinese of the mitigation's outcome, the runs' names and the tables' headings.
WORDS_ZH = {"helped": "有帮助", "hurt": "反而有害", "made no clear difference": "没有明显差别",
            "training": "训练方式", "teacher forcing": "教师强制", "scheduled sampling": "计划采样",
            "TF loss": "TF 损失", "TF token acc": "TF token 准确率", "greedy token acc": "贪心 token 准确率",
            "greedy BLEU": "贪心解码 BLEU", "exact match": "完全匹配", "gap early": "前段差距", "gap late": "后段差距",
            "references": "参考句数", "TF acc": "TF 准确率", "greedy acc": "贪心准确率", "on track": "仍在参考前缀上",
            "SS: TF acc": "SS：TF 准确率", "SS: greedy acc": "SS：贪心准确率", "step": "步数", "SS: BLEU": "SS：BLEU"}


def verdict_of(f: dict, lang: str = "en") -> tuple[str, str]:
    """Two lines built from :func:`findings_of`'s numbers (their wording follows the measured direction), in
    ``lang`` ("en" or "zh")."""
    tf, ss = f["teacher_forcing"], f["scheduled_sampling"]
    early, late = tf["stages"]["early"], tf["stages"]["late"]
    ss_late = ss["stages"]["late"]
    if lang == "zh":
        grows = "随输出位置变大" if f["checks"]["gap_grows_with_position"] else "并没有随输出位置变大"
        return (
            f"用教师强制训练 {f['steps']} 步后，喂给模型参考前缀时它在留出集上答对 {tf['tf_accuracy']:.0%} 的 token，"
            f"让它自由生成时只答对 {tf['greedy_accuracy']:.0%}（贪心解码 BLEU {tf['bleu']:.1f}）；这个差距{grows}："
            f"位置 {early['positions']} 为 {early['gap']:+.0%}，位置 {late['positions']} 为 {late['gap']:+.0%}"
            f"（教师强制 {early['teacher_forced']:.0%} → {late['teacher_forced']:.0%}，贪心 {early['greedy']:.0%} → "
            f"{late['greedy']:.0%}，仍在参考前缀上的比例：{late['on_track']:.0%}）。",
            f"计划采样（以逐渐升到 {f['p_max']} 的概率 p 输入模型自己的 arg-max 结果，种子、批次和训练预算相同）"
            f"在这里{WORDS_ZH[f['mitigation']]}：贪心解码 BLEU {ss['bleu']:.1f} 对 {tf['bleu']:.1f}，贪心 token 准确率 "
            f"{ss['greedy_accuracy']:.0%} 对 {tf['greedy_accuracy']:.0%}，后段位置的差距 {ss_late['gap']:+.0%} 对 "
            f"{late['gap']:+.0%}（一个种子）；评价模型要看它自由生成的输出，不能看教师强制下的准确率。",
        )
    grows = "grows" if f["checks"]["gap_grows_with_position"] else "does NOT grow"
    first = (f"After {f['steps']} teacher-forced steps the model gets {tf['tf_accuracy']:.0%} of held-out tokens right "
             f"when fed the reference prefix but {tf['greedy_accuracy']:.0%} when it runs free (greedy BLEU "
             f"{tf['bleu']:.1f}); the gap {grows} along the output, {early['gap']:+.0%} at positions "
             f"{early['positions']} to {late['gap']:+.0%} at {late['positions']} (teacher-forced "
             f"{early['teacher_forced']:.0%} → {late['teacher_forced']:.0%}, greedy {early['greedy']:.0%} → "
             f"{late['greedy']:.0%}, still on the reference prefix: {late['on_track']:.0%}).")
    second = (f"Scheduled sampling (own arg-max inputs with p rising to {f['p_max']}, same seed, batches and "
              f"budget) {f['mitigation']} here: greedy BLEU {ss['bleu']:.1f} vs {tf['bleu']:.1f}, greedy token "
              f"accuracy {ss['greedy_accuracy']:.0%} vs {tf['greedy_accuracy']:.0%}, late-position gap "
              f"{ss_late['gap']:+.0%} vs {late['gap']:+.0%} (one seed); judge a model by its free-running "
              f"output, never by its teacher-forced accuracy.")
    return first, second


COLOURS = {"teacher forcing": "C0", "scheduled sampling": "C1"}


def _plot_training(runs: dict[str, Run], path) -> str:
    fig, axes = figure(1, 3, width=4.4)
    for name, run in runs.items():
        steps = [c.step for c in run.checkpoints]
        colour = COLOURS[name]
        axes[0][0].plot(steps, [c.tf_loss for c in run.checkpoints], "o-", color=colour, label=name)
        axes[0][1].plot(steps, [c.tf_accuracy for c in run.checkpoints], "o-", color=colour,
                        label=f"{name}: teacher-forced")
        axes[0][1].plot(steps, [c.greedy_accuracy for c in run.checkpoints], "s--", color=colour,
                        label=f"{name}: greedy")
        axes[0][2].plot(steps, [c.bleu for c in run.checkpoints], "o-", color=colour, label=f"{name}: BLEU")
        axes[0][2].plot(steps, [100 * c.exact_match for c in run.checkpoints], "s--", color=colour,
                        label=f"{name}: exact match %")
    axes[0][0].set(xlabel="step", title="held-out teacher-forced loss")
    axes[0][1].set(xlabel="step", title="held-out token accuracy", ylim=(0, 1))
    axes[0][2].set(xlabel="step", title="greedy decoding: BLEU, exact match")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    return save(fig, path)


def _plot_positions(runs: dict[str, Run], path) -> str:
    fig, axes = figure(1, 3, width=4.4)
    base = runs["teacher forcing"]
    for name, run in runs.items():
        rows = run.final.per_position()
        t = [r["position"] for r in rows]
        colour = COLOURS[name]
        axes[0][0].plot(t, [r["teacher_forced"] for r in rows], "o-", color=colour, label=f"{name}: teacher-forced")
        axes[0][0].plot(t, [r["greedy"] for r in rows], "s--", color=colour, label=f"{name}: greedy")
        axes[0][1].plot(t, [r["on_track"] for r in rows], "o-", color=colour, label=name)
    shades = len(base.checkpoints)
    for i, checkpoint in enumerate(base.checkpoints[1:], start=1):
        rows = checkpoint.per_position()
        axes[0][2].plot([r["position"] for r in rows], [r["teacher_forced"] - r["greedy"] for r in rows],
                        color=str(0.8 * (1 - i / (shades - 1))), label=f"step {checkpoint.step}")
    axes[0][0].set(xlabel="output position t", title="token accuracy at position t (final)", ylim=(0, 1))
    axes[0][1].set(xlabel="output position t", title="greedy output still on the reference prefix", ylim=(0, 1))
    axes[0][2].set(xlabel="output position t", title="teacher forcing: gap (TF − greedy) over training")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    return save(fig, path)


def _body(f: dict, lang: str = "en") -> str:
    """The markdown between the verdict and the plots, in ``lang`` ("en" or "zh"): tables built once, relabelled."""
    from plumbing.tables import markdown_table

    tf, ss = f["teacher_forcing"], f["scheduled_sampling"]
    table = [{"training": name, "TF loss": r["tf_loss"], "TF token acc": r["tf_accuracy"],
              "greedy token acc": r["greedy_accuracy"], "greedy BLEU": r["bleu"], "exact match": r["exact_match"],
              "gap early": r["stages"]["early"]["gap"], "gap late": r["stages"]["late"]["gap"]}
             for name, r in (("teacher forcing", tf), ("scheduled sampling", ss))]
    positions = [{"t": a["position"], "references": a["references"], "TF acc": a["teacher_forced"],
                  "greedy acc": a["greedy"], "on track": a["on_track"], "SS: TF acc": b["teacher_forced"],
                  "SS: greedy acc": b["greedy"]} for a, b in zip(tf["per_position"], ss["per_position"])]
    curve = [{"step": a["step"], "TF acc": a["tf_accuracy"], "greedy acc": a["greedy_accuracy"], "BLEU": a["bleu"],
              "SS: TF acc": b["tf_accuracy"], "SS: greedy acc": b["greedy_accuracy"], "SS: BLEU": b["bleu"]}
             for a, b in zip(tf["curve"], ss["curve"])]
    if lang == "zh":
        table, positions, curve = (translated(rows, WORDS_ZH) for rows in (table, positions, curve))
        return "\n\n".join([
            f"## 训练 {f['steps']} 步后，{f['held_out']} 个留出句子（{f['difficulty']} 语料）",
            markdown_table(table),
            "*TF*：教师强制（解码器读入参考前缀）。*贪心 token 准确率*：贪心输出在位置 t 的 token 与参考译文在 t 的 "
            "token 相同（含 EOS；漏掉或多出一个 token 会让后面整体错位，自由生成的错误正是这样累积的）。"
            "*前段 / 后段差距*：在前三个位置 / 所报告位置的最后三分之一上，TF 准确率减去贪心准确率。",
            f"## 逐个输出位置（至少有 {MIN_COUNT} 个参考句能到达的位置）",
            markdown_table(positions),
            "## 训练过程中（留出集检查点）",
            markdown_table(curve),
            f"计划采样在最后几步里替换了 {f['replaced_share_last_steps']:.1%} 的解码器输入（p 乘以它的猜测是真实 token "
            "的位置所占比例）；它的训练损失是在这些混合输入上测的，所以只有留出集上的数字能比较两次运行。",
        ])
    return "\n\n".join([
        f"## After {f['steps']} steps, {f['held_out']} held-out sentences ({f['difficulty']} corpus)",
        markdown_table(table),
        "*TF*: teacher-forced (the decoder reads the reference prefix). *Greedy token accuracy*: the greedy "
        "output's token at position t equals the reference's token at t (EOS included; a token missing or extra "
        "shifts the rest, which is how a free-running error compounds). *Gap early / late*: TF minus greedy "
        "accuracy over the first three positions / the last third of the positions reported.",
        f"## Per output position (positions that at least {MIN_COUNT} references reach)",
        markdown_table(positions),
        "## Over training (held-out checkpoints)",
        markdown_table(curve),
        f"Scheduled sampling replaced {f['replaced_share_last_steps']:.1%} of the decoder inputs in its last "
        "steps (p times the share of positions where its guess was a real token); its training loss is measured "
        "on those mixed inputs, so only the held-out numbers compare the two runs.",
    ])


def run(settings: LabSettings) -> LessonResult:
    """Train with teacher forcing and with scheduled sampling; compare teacher-forced and free-running quality."""
    d_model = 64
    steps = settings.steps(1200, 400)
    every = max(1, steps // 8)
    data = translation_data(3000 if settings.quick else 8000, seed=settings.seed, difficulty=DIFFICULTY)
    held_out = data.pairs["test"][: max(50, round(200 * min(settings.scale, 1.0)))]
    schedules = {"teacher forcing": None, "scheduled sampling": lambda step: mix_probability(step, steps)}
    runs = {name: train_run(name, data, settings, steps, every, held_out, schedule, d_model)
            for name, schedule in schedules.items()}
    f = findings_of(runs, steps, len(held_out))
    figures = [_plot_training(runs, settings.out / "exposure_training.png"),
               _plot_positions(runs, settings.out / "exposure_positions.png")]
    f["train_loss"] = {name: r.loss for name, r in runs.items()}
    return LessonResult(verdict_of(f), f["holds"], f, _body(f), figures, verdict_of(f, "zh"), _body(f, "zh"))
