"""Lesson "mask": masked attention scores must become −∞, never 0, and a mask must have the shape it is meant to.

Vaswani et al. 2017, §3.2.3: the decoder's self-attention is masked "by masking out (setting to −∞) all values
in the input of the softmax which correspond to illegal connections". The classic mistake fills them with 0
instead (``scores.masked_fill(~mask, 0)``, or multiplying the scores by a 0/1 mask): but exp(0) = 1 is a real
weight, so every future token still gets a share of the attention, about as much as a past token with an
unremarkable score. With teacher forcing the whole target is in the decoder's input, so the model learns to
read the next token through that leak: the training loss looks fine, or better than fine. At inference the
future does not exist yet (greedy decoding feeds one token at a time), the shortcut is gone and the
translations collapse. The article calls this the train/inference gap.

The second half is about shapes: torch broadcasts a mask of the wrong shape whenever the sizes happen to line
up (a ``(B, N)`` padding mask where ``(B, 1, 1, N)`` was meant reads as ``(Nq, Nk)``), and an out-of-place
``masked_fill`` even grows the scores to fit the mask. ``core.masks.check_mask`` (called by every
``MultiHeadAttention``) rejects masks that do not broadcast to ``(B, H, Nq, Nk)`` with a ValueError; what no
shape check can see (a transposed square mask, ``B == Nq``) is listed as such.

The mistake here is :class:`ZeroFilledMaskAttention`, a lab kernel assigned to the decoder self-attention's
``MultiHeadAttention.kernel``; everything else is the core model, same seed and budget.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.attention import AttentionKernel, ScaledDotProductAttention
from core.masks import causal_mask, merge_masks
from core.model import Transformer
from core.multihead import MultiHeadAttention
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.toolkit import (
    Seq2SeqData,
    attention_maps,
    batch,
    bleu,
    figure,
    save,
    sequence_loss,
    small_transformer,
    smooth,
    train,
    translated,
    translation_data,
)


class ZeroFilledMaskAttention(AttentionKernel):
    """The mistake: softmax(Q Kᵀ/√d_k) with masked scores set to **0** instead of −∞.

    Follows the :class:`core.attention.AttentionKernel` interface. ``is_causal`` is applied as an explicit
    bottom-right causal mask merged with ``mask`` (as the core does), and every masked score is then filled with
    0, so masked keys (the future, padding) keep weight exp(0) / Σ. With a key/value cache (one new query, no
    mask) there is nothing to fill and it computes exactly what the core kernel computes.
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, Nq, Nk)
        if bias is not None:
            scores = scores + bias
        if is_causal:
            mask = merge_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device))
        if mask is not None:
            scores = scores.masked_fill(~mask, 0.0)  # the bug: 0 is not "no weight", exp(0) = 1
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)  # (B, H, Nq, Nk)
        return self.dropout(weights) @ v, (weights if need_weights else None)  # (B, H, Nq, Dv)


def use_zero_fill(model: Transformer, on: bool = True) -> Transformer:
    """Give every decoder self-attention the 0-filling kernel (``on``) or the core's fused −∞ kernel back."""
    for layer in model.decoder.layers:
        layer.self_attn.kernel = ZeroFilledMaskAttention() if on else ScaledDotProductAttention()
    return model


# --- (a) the leak ------------------------------------------------------------------------------------------
def future_leak(model: Transformer, data: Seq2SeqData, rows: list) -> float:
    """Mean total attention weight that a real target position i puts on positions j > i, over every decoder
    self-attention layer and head (teacher forcing, as in training). Exactly 0 for a correct mask."""
    src, tgt = batch(data, rows)
    tgt_in = tgt[:, :-1]  # (B, T) decoder inputs
    maps = attention_maps(model, src, tgt_in)
    n = tgt_in.shape[1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (T, T) j > i
    real = (tgt_in != data.tokenizer.pad_id)[:, None, :]  # (B, 1, T) real query rows
    leaks = [(w * future).sum(-1)[real.expand(-1, w.shape[1], -1)].mean()  # weights w: (B, H, T, T)
             for name, w in maps.items() if name.startswith("decoder.") and name.endswith("self_attn")]
    return float(torch.stack(leaks).mean())


@torch.no_grad()
def heldout_loss(model: Transformer, data: Seq2SeqData, rows: list) -> float:
    """Teacher-forced cross-entropy per token on ``rows``."""
    src, tgt = batch(data, rows)
    return float(sequence_loss(model.eval(), src, tgt, data.tokenizer.pad_id))


def inference_view_loss(model: Transformer, data: Seq2SeqData, rows: list) -> float:
    """The same weights scored as decoding sees them: no future tokens, i.e. with the −∞ kernel put back."""
    zero_filled = isinstance(model.decoder.layers[0].self_attn.kernel, ZeroFilledMaskAttention)
    use_zero_fill(model, on=False)
    loss = heldout_loss(model, data, rows)
    use_zero_fill(model, on=zero_filled)
    return loss


def train_arm(data: Seq2SeqData, zero_fill: bool, steps: int, settings: LabSettings) -> dict:
    """Train one model (same seed and budget for both arms); record the leak along the way and score it."""
    model = use_zero_fill(small_transformer(data, seed=settings.seed), on=zero_fill)
    probe, test = data.pairs["valid"][:64], data.pairs["test"]
    leak_curve = [(0, future_leak(model, data, probe))]
    every = max(1, steps // 10)

    def on_step(step: int, m: nn.Module) -> None:  # called before update `step`: `step` updates are done
        if step and step % every == 0:
            leak_curve.append((step, future_leak(m, data, probe)))

    log = train(model, data, steps, lr=3e-3, seed=settings.seed, progress=settings.progress,
                desc="0-filled mask" if zero_fill else "−∞ mask", on_step=on_step)
    leak_curve.append((steps, future_leak(model, data, probe)))
    return {"model": model, "log": log, "leak_curve": leak_curve, "leak_init": leak_curve[0][1],
            "leak_trained": leak_curve[-1][1], "train_loss": log.final(),
            "test_loss": heldout_loss(model, data, test), "inference_loss": inference_view_loss(model, data, test),
            **bleu(model, data, "test", limit=max(50, round(200 * settings.scale)))}


# --- (c) masks of the wrong shape --------------------------------------------------------------------------
def plain_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Attention as plain torch code writes it: ``masked_fill`` with −∞, softmax, weights @ v."""
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


def _try(fn) -> tuple[Tensor | None, str]:
    try:
        return fn(), ""
    except (RuntimeError, ValueError) as err:
        return None, f"{type(err).__name__}: {str(err).splitlines()[0]}"


def _case(name: str, q: Tensor, kv: Tensor, right: Tensor, wrong: Tensor, core_call) -> dict:
    """Run one wrong mask through plain ``masked_fill``, ``F.scaled_dot_product_attention`` and the core."""
    expected = plain_attention(q, kv, kv, right)  # (B, H, Nq, Dh)
    row = {"case": name, "right shape": tuple(right.shape), "wrong shape": tuple(wrong.shape)}
    for label, fn in (("masked_fill", plain_attention), ("sdpa", F.scaled_dot_product_attention)):
        out, error = _try(lambda fn=fn: fn(q, kv, kv, wrong))
        if out is None:
            row[label] = error
            continue
        # A grown output is read the way decoding reads it: the last query row.
        got = out[..., -expected.shape[-2]:, :]
        diff = float((got - expected).abs().max())
        grown = f", output {tuple(out.shape)} instead of {tuple(expected.shape)}" if out.shape != expected.shape else ""
        row[label] = f"accepted silently{grown}; max abs error {diff:.3g}"
        row[f"{label}_silent_wrong"] = diff > 1e-6 or out.shape != expected.shape
    _, error = _try(core_call)
    row["core"] = error or "accepted (no shape check can tell)"
    row["core_raises"] = error.startswith("ValueError")
    return row


def wrong_shape_cases(seed: int) -> list[dict]:
    """Three wrong masks: plain ``masked_fill`` accepts each (SDPA all but the first); the core rejects the one
    whose shape does not broadcast to ``(B, H, Nq, Nk)`` and, like any shape check, cannot see the other two."""
    gen = torch.Generator().manual_seed(seed)
    B, H, N, Dh = 4, 2, 4, 8  # B == N on purpose: that is when a (B, N) mask broadcasts silently
    lengths = torch.tensor([4, 3, 2, 1])
    pad = torch.arange(N)[None, :] < lengths[:, None]  # (B, N) True = real token
    mha = MultiHeadAttention(H * Dh, H).eval()
    x = torch.randn(B, 1, H * Dh, generator=gen)  # (B, 1, D): one decoding step
    memory = torch.randn(B, N, H * Dh, generator=gen)  # (B, N, D)
    q1, q, kv = (torch.randn(B, H, n, Dh, generator=gen) for n in (1, N, N))
    causal = causal_mask(N)  # (N, N)
    with torch.no_grad():
        return [
            _case("source padding (B, S) instead of (B, 1, 1, S), cross-attention at one decoding step (Nq = 1)",
                  q1, kv, pad[:, None, None, :], pad, lambda: mha(x, memory, mask=pad)),
            _case("padding (B, N) instead of (B, 1, 1, N), self-attention with B = N",
                  q, kv, pad[:, None, None, :], pad, lambda: mha(memory, mask=pad)),
            _case("causal (N, N) transposed", q, kv, causal, causal.T, lambda: mha(memory, mask=causal.T)),
        ]


# --- the lesson --------------------------------------------------------------------------------------------
def _plot(right: dict, zero: dict, data: Seq2SeqData, settings: LabSettings) -> str:
    fig, axes = figure(2, 2)
    ax = axes[0, 0]
    for arm, label in ((right, "−∞ (correct)"), (zero, "0-filled")):
        line, = ax.plot(smooth(arm["log"].loss), label=f"{label}: training loss")
        ax.axhline(arm["inference_loss"], ls="--", color=line.get_color(),
                   label=f"{label}: test loss, as decoding sees it")
    ax.set(xlabel="step", ylabel="cross-entropy", yscale="log", title="Teacher-forced loss vs inference view")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for arm, label in ((right, "−∞ (correct)"), (zero, "0-filled")):
        steps, leak = zip(*arm["leak_curve"])
        ax.plot(steps, leak, marker="o", label=label)
    ax.set(xlabel="step", ylabel="mean weight on j > i", title="Attention leaking to future tokens")
    ax.legend()
    ax = axes[1, 0]
    names, xs = ("BLEU", "exact match ×100"), torch.arange(2).float()
    for shift, (arm, label) in zip((-0.2, 0.2), ((right, "−∞ (correct)"), (zero, "0-filled"))):
        bars = ax.bar(xs + shift, [arm["bleu"], 100 * arm["exact_match"]], width=0.4, label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(xs.tolist(), names)
    ax.set(title="Greedy decoding on the test split")
    ax.legend()
    ax = axes[1, 1]
    src, tgt = batch(data, data.pairs["test"][:1])
    maps = attention_maps(zero["model"], src, tgt[:, :-1])
    ax.imshow(maps["decoder.layers.0.self_attn"][0].mean(0).numpy(), cmap="viridis", vmin=0)
    ax.set(xlabel="key position j", ylabel="query position i", title="0-filled, trained: layer 0 (mean of heads)")
    return save(fig, settings.out / "mask.png")


def run(settings: LabSettings) -> LessonResult:
    data = translation_data(3000, seed=settings.seed)
    steps = settings.steps(1500, 400)
    right, zero = (train_arm(data, zero_fill, steps, settings) for zero_fill in (False, True))
    cases = wrong_shape_cases(settings.seed)
    keys = ("leak_init", "leak_trained", "train_loss", "test_loss", "inference_loss", "bleu", "exact_match")
    findings = {"steps": steps, "right": {k: right[k] for k in keys}, "zero_filled": {k: zero[k] for k in keys},
                "wrong_shape": cases}
    caught = cases[0]["core_raises"] and cases[0]["masked_fill_silent_wrong"]
    holds = (right["leak_init"] == right["leak_trained"] == 0.0 and zero["leak_init"] > 0 and zero["leak_trained"] > 0
             and zero["inference_loss"] > zero["test_loss"] and right["bleu"] >= zero["bleu"] and caught)
    table = [{"mask fill": label, "leak at init": arm["leak_init"], "leak trained": arm["leak_trained"],
              "training loss": arm["train_loss"], "test loss (teacher forcing)": arm["test_loss"],
              "test loss (no future)": arm["inference_loss"], "greedy BLEU": arm["bleu"],
              "exact match": arm["exact_match"]} for arm, label in ((right, "−∞"), (zero, "0"))]
    shapes = [{k: v for k, v in case.items() if not k.endswith(("_wrong", "_raises"))} for case in cases]
    (verdict, body), (verdict_zh, body_zh) = (_text(findings, table, shapes, lang) for lang in ("en", "zh"))
    return LessonResult(verdict, holds, findings, body, [_plot(right, zero, data, settings)], verdict_zh, body_zh)


# The Chinese of the tables' headings and case names (the notes are written per language in _text); the cells
# that quote an error or a shape stay as the library wrote them.
WORDS_ZH = {"mask fill": "掩码填充值", "leak at init": "初始化时的泄漏", "leak trained": "训练后的泄漏",
            "training loss": "训练损失", "test loss (teacher forcing)": "测试损失（教师强制）",
            "test loss (no future)": "测试损失（看不到未来）", "greedy BLEU": "贪心解码 BLEU",
            "exact match": "完全匹配",
            "case": "情形", "right shape": "正确形状", "wrong shape": "错误形状", "core": "核心库",
            "source padding (B, S) instead of (B, 1, 1, S), cross-attention at one decoding step (Nq = 1)":
                "源端填充掩码用 (B, S) 而不是 (B, 1, 1, S)，单步解码时的交叉注意力（Nq = 1）",
            "padding (B, N) instead of (B, 1, 1, N), self-attention with B = N":
                "填充掩码用 (B, N) 而不是 (B, 1, 1, N)，B = N 时的自注意力",
            "causal (N, N) transposed": "因果掩码 (N, N) 被转置"}


def _text(findings: dict, table: list[dict], shapes: list[dict], lang: str) -> tuple[tuple[str, str], str]:
    """The verdict and the body in ``lang`` ("en" or "zh") from the same numbers (tables: English headings)."""
    from plumbing.tables import markdown_table

    right, zero, steps, case = findings["right"], findings["zero_filled"], findings["steps"], findings["wrong_shape"][0]
    if lang == "zh":
        verdict = (
            f"被掩码的分数填 0 时，初始化就有 {zero['leak_init']:.0%} 的解码器注意力漏到未来的 token 上（训练 {steps} "
            "步后为 "
            f"{zero['leak_trained']:.0%}）：能看到未来时测试损失 {zero['test_loss']:.3f}，看不到时 "
            f"{zero['inference_loss']:.3f}；贪心解码 BLEU {zero['bleu']:.1f}，正确掩码为 {right['bleu']:.1f}。",
            f"要填 −∞（泄漏恰好为 0，BLEU {right['bleu']:.1f}，完全匹配 {right['exact_match']:.0%}），"
            "并让掩码经过校验："
            f"解码时给一个 (B, S) 的掩码，masked_fill "
            f"{'不声不响地把它扩展了' if case['masked_fill_silent_wrong'] else '会拒绝它'}，核心库"
            f"{'抛出 ValueError' if case['core_raises'] else '接受了它'}。",
        )
        body = (f"## 同一种子，各训练 {steps} 步\n\n{markdown_table(translated(table, WORDS_ZH))}\n\n"
                "*泄漏*：目标位置放在其后位置上的权重之和的平均（解码器自注意力，所有层、所有头）。"
                "*看不到未来*：同一组权重改用 −∞ 掩码打分，"
                "这正是贪心解码看到的情形（一次一个 token，后面的 token 还不存在）。"
                f"\n\n## 形状错误的掩码\n\n{markdown_table(translated(shapes, WORDS_ZH))}\n")
        return verdict, body
    verdict = (
        f"Filling masked scores with 0 leaks {zero['leak_init']:.0%} of the decoder's attention to future tokens at "
        f"init ({zero['leak_trained']:.0%} after {steps} steps): test loss {zero['test_loss']:.3f} with the future "
        f"visible, {zero['inference_loss']:.3f} without it; greedy BLEU {zero['bleu']:.1f} vs {right['bleu']:.1f}.",
        f"Fill with −∞ (leak exactly 0, BLEU {right['bleu']:.1f}, exact match {right['exact_match']:.0%}) and let "
        f"the mask be validated: a (B, S) mask at a decoding step is "
        f"{'grown silently' if case['masked_fill_silent_wrong'] else 'rejected'} by masked_fill, the core "
        f"{'raises ValueError' if case['core_raises'] else 'accepts it'}.",
    )
    body = (f"## Same seed, {steps} steps each\n\n{markdown_table(table)}\n\n"
            "*Leak*: mean total weight a target position puts on later positions (decoder self-attention, every "
            "layer and head). *No future*: the same weights scored with the −∞ mask, which is what greedy decoding "
            "sees (one token at a time, no later tokens exist).\n\n"
            f"## Masks of the wrong shape\n\n{markdown_table(shapes)}\n")
    return verdict, body
