"""Lesson ``moe-routing``: how a mixture of experts routes tokens, and what its capacity can leak.

A mixture-of-experts FFN (:mod:`zoo.moe`: Shazeer et al. 2017, GShard, Switch Transformer) sends each token to
its top-k of E expert FFNs. Three things decide whether that works, and this lesson measures each on a small
translation model whose every other FFN is the package's :class:`~zoo.moe.MoEFFN` (8 experts):

1. **Load balance.** Nothing in the task loss asks the router to spread tokens, and an expert that gets more
   tokens gets better and so attracts more: the load collapses onto a few experts. Switch's balancing loss
   ``E · Σ_e f_e · P_e`` (minimal at a uniform load) counters it. Measured on top-1 routing trained without a
   capacity (which would hide part of a collapse): the load fraction of each expert on a held-out batch every
   few steps, with the loss (α = 1e-2) and without it; collapse as the entropy of the load (ln E when uniform,
   0 when one expert takes everything) and the busiest expert's share.
2. **Capacity.** In training each expert takes at most ``⌈factor · k · N / E⌉`` assignments per sequence; the
   rest are dropped (the token passes through the residual). Measured: the share of dropped assignments and
   the quality (held-out loss and test BLEU, evaluation being dropless) at factors 0.5, 1.0, 1.25 and 2.0, and
   top-1 (Switch) against top-2 (GShard) at 1.25.
3. **Who competes for a slot.** The package ranks a sequence's assignments in position order, so only earlier
   tokens of the same sentence can take a token's slot. The old policy, :func:`batch_ranked_dispatch`, ranks
   all B·N·k assignments of the batch together, every first choice before any second choice (GShard's
   priority): a token's second choice then loses its slot to the first choices of *later* tokens, and under
   teacher forcing the decoder's outputs at a position depend on the target tokens after it. Measured with the
   perturbation probe of :mod:`zoo.analysis.probes` (change every target token after position t; how far do the logits
   at positions <= t move?) on the same trained weights, in training mode, with each policy.

The old policy is a lab switch (:func:`use_batch_ranking` on a built model), never an option of ``zoo.moe``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

import zoo.moe.layer as moe_layer
from plumbing.tables import markdown_table
from tasks.lab.lesson import LabSettings, LessonResult
from tasks.lab.toolkit import (
    Seq2SeqData,
    batch,
    bleu,
    figure,
    save,
    sequence_loss,
    small_transformer,
    translated,
    translation_data,
)
from zoo.analysis.probes import causal_leak
from zoo.moe import MoEFFN, auxiliary_loss, moe_layers, routing_stats
from zoo.moe.dispatch import Dispatch, plan_dispatch

EXPERTS = 8
FACTORS = (0.5, 1.0, 1.25, 2.0)  # capacity factors of the sweep; 1.25 is the package default (Switch: 1.0-1.25)
BALANCE = 1e-2  # Switch's α for the balancing loss
Z_WEIGHT = 1e-3  # ST-MoE's router z-loss weight, in every run (it keeps the router logits small, not balanced)
WIDTH = 64  # d_model of the lesson's model (tiny preset otherwise: 2 + 2 layers, MoE in layer 1 of each stack)
LR = 2e-3
COLLAPSE = 0.1  # nats of load entropy (mean over training): "the balancing loss raises it" needs at least this


# --- the old capacity policy, as a lab switch -----------------------------------------------------------
def batch_ranked_dispatch(experts: Tensor, n_experts: int, seq_len: int, real: Tensor | None = None,
                          capacity: int | None = None, block: int = 1) -> Dispatch:
    """The mistake: every assignment of the call ranked together, all first choices before any second choice.

    Same signature and same expert buffers as :func:`zoo.moe.dispatch.plan_dispatch` (each expert holds
    ``capacity`` rows per sequence, so ``B · capacity`` rows in all), but the queue of an expert is shared by
    the whole batch and ordered by (choice, token): a token's second choice waits behind the first choices of
    every token, later ones included. Built from ``plan_dispatch`` itself, on the assignments reordered
    choice-major as one sequence of ``k · T`` single choices. Padding is still never routed, so the only
    difference from the package's policy is who competes for a slot. Without ``capacity`` (dropless) the two
    policies process the same assignments.
    """
    T, k = experts.shape
    if capacity is None:
        return plan_dispatch(experts, n_experts, seq_len, real, None, block)
    sequences = T // max(seq_len, 1)
    flat = experts.t().reshape(-1, 1)  # (k·T, 1): every first choice, then every second choice
    flat_real = None if real is None else real.repeat(k)  # (k·T,)
    plan = plan_dispatch(flat, n_experts, k * T, flat_real, sequences * capacity)
    slot = plan.slot.view(k, T).t().contiguous()  # (T, k); the not-processed row index is sum(rows) in both layouts
    return Dispatch(slot, plan.rows, plan.routed, plan.kept)


@contextmanager
def _dispatch_of_moe_layers(policy: Callable[..., Dispatch]) -> Iterator[None]:
    """``MoEFFN.forward`` looks ``plan_dispatch`` up in :mod:`zoo.moe.layer` at call time: swap it in there
    for the duration of one call (the package has no dispatch argument, on purpose)."""
    saved = moe_layer.plan_dispatch
    moe_layer.plan_dispatch = policy
    try:
        yield
    finally:
        moe_layer.plan_dispatch = saved


class BatchRankedMoEFFN(MoEFFN):
    """:class:`~zoo.moe.MoEFFN` with :func:`batch_ranked_dispatch` in place of the package's dispatch."""

    def forward(self, x: Tensor, token_mask: Tensor | None = None) -> Tensor:
        with _dispatch_of_moe_layers(batch_ranked_dispatch):
            return super().forward(x, token_mask)


def use_batch_ranking(model: nn.Module, on: bool = True) -> nn.Module:
    """Switch every MoE layer of ``model`` to the batch-ranked policy (``on``) or back to the package's.

    The layers stay the same objects with the same weights (only their class changes), so the two policies
    are compared on exactly the same model.
    """
    layers = moe_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no MoE layers to switch; build it with ffn='moe' "
                         "(e.g. tasks.lab.moe_routing.moe_model)")
    for layer in layers.values():
        layer.__class__ = BatchRankedMoEFFN if on else MoEFFN
    return model


# --- measurements ----------------------------------------------------------------------------------------
def load_entropy(load: list[float]) -> float:
    """Entropy (nats) of a load distribution over experts: ln E when uniform, 0 when one expert takes all."""
    return -sum(p * math.log(p) for p in load if p > 0)


@torch.no_grad()
def routing_probe(model: nn.Module, src: Tensor, tgt: Tensor, pad_id: int) -> dict[str, dict]:
    """Per MoE layer on a held-out batch in training mode (capacity on): the load, dropped share, load
    entropy and largest load; plus ``loss``, the teacher-forced loss of that forward."""
    was_training = model.training
    model.train()
    loss = float(sequence_loss(model, src, tgt, pad_id))
    model.train(was_training)
    stats = {name: {"load": s["load"], "dropped": s["dropped"], "load_entropy": load_entropy(s["load"]),
                    "max_load": max(s["load"])} for name, s in routing_stats(model).items()}
    return {"loss": loss, "layers": stats}


def mean_over_layers(probe: dict, key: str) -> float:
    values = [layer[key] for layer in probe["layers"].values()]
    return sum(values) / len(values)


@torch.no_grad()
def held_out_loss(model: nn.Module, src: Tensor, tgt: Tensor, pad_id: int) -> float:
    """Teacher-forced loss in evaluation (dropless): the quality of what training left in the weights."""
    model.eval()
    return float(sequence_loss(model, src, tgt, pad_id))


@dataclass
class RoutedRun:
    """A training run: the task loss per step, and :func:`routing_probe` at ``probe_steps``."""

    loss: list[float] = field(default_factory=list)
    probe_steps: list[int] = field(default_factory=list)
    probes: list[dict] = field(default_factory=list)


def train_routed(model: nn.Module, data: Seq2SeqData, steps: int, probe: tuple[Tensor, Tensor], balance: float,
                 seed: int = 0, progress: bool = True, desc: str = "", probes: int = 25) -> RoutedRun:
    """Adam on the task loss plus the auxiliary loss (balance weight ``balance``, z-loss :data:`Z_WEIGHT`).

    The toolkit's :func:`~tasks.lab.toolkit.train` optimises the task loss alone; this loop adds
    :func:`zoo.moe.auxiliary_loss`, as ``zoo train`` does, and probes the routing about ``probes`` times
    (:func:`routing_probe` on the held-out ``probe`` batch, and once more at the end).
    Linear warm-up over the first 10 % of the steps, then a linear decay to 0 (a decisive end state).
    """
    from tasks.engine.progress import progress_bar

    rows, pad = data.pairs["train"], data.tokenizer.pad_id
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98), eps=1e-9)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup + 1))))
    every = max(1, steps // probes)
    run, order = RoutedRun(), []
    for step in progress_bar(range(steps), desc=desc, disable=not progress, leave=False):
        if step % every == 0:
            run.probe_steps.append(step)
            run.probes.append(routing_probe(model, *probe, pad))
        model.train()
        if len(order) < 32:
            order += torch.randperm(len(rows), generator=gen).tolist()
        picked, order = order[:32], order[32:]
        src, tgt = batch(data, [rows[i] for i in picked])
        task = sequence_loss(model, src, tgt, pad)
        loss = task + auxiliary_loss(model, balance_weight=balance, z_weight=Z_WEIGHT)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        run.loss.append(float(task.detach()))
    run.probe_steps.append(steps)
    run.probes.append(routing_probe(model, *probe, pad))
    model.eval()
    return run


@torch.no_grad()
def leak(model: nn.Module, src: Tensor, tgt: Tensor, positions: list[int]) -> dict[str, float]:
    """The largest move of the logits at positions <= t when every target token after t changes, over
    ``positions``, in training mode (capacity on), with the package's policy and the batch-ranked one."""
    model.train()
    out: dict[str, float] = {"positions": len(positions)}
    for name, ranked in (("causal", False), ("batch_ranked", True)):
        use_batch_ranking(model, ranked)
        drifts = [causal_leak(model, src, tgt, t) for t in positions]
        out[name] = max(d.max_abs for d in drifts)
        out[f"{name}_relative"] = max(d.relative for d in drifts)
        out[f"{name}_positions_moved"] = sum(d.max_abs > 0 for d in drifts)
    use_batch_ranking(model, False)
    model.eval()
    return out


def moe_model(data: Seq2SeqData, seed: int, k: int = 2, capacity_factor: float = 1.25,
              dropless: bool = False) -> nn.Module:
    """The lesson's model: the lab's tiny Transformer at width :data:`WIDTH` with the ``"moe"`` FFN."""
    options = {"n_experts": EXPERTS, "k": k, "capacity_factor": capacity_factor, "dropless": dropless}
    return small_transformer(data, seed=seed, d_model=WIDTH, d_ff=2 * WIDTH, ffn="moe", ffn_options=options)


# --- the lesson ------------------------------------------------------------------------------------------
@dataclass
class Bench:
    """What every run of the lesson shares: the data, the held-out batch and the budget."""

    data: Seq2SeqData
    src: Tensor  # (B, S) held-out sources
    tgt: Tensor  # (B, T + 2) their targets, bos … eos
    steps: int
    settings: LabSettings

    @property
    def pad(self) -> int:
        return self.data.tokenizer.pad_id


def _trained(bench: Bench, name: str, balance: float = BALANCE, probes: int = 25,
             **model) -> tuple[nn.Module, RoutedRun]:
    net = moe_model(bench.data, bench.settings.seed, **model)
    run = train_routed(net, bench.data, bench.steps, (bench.src, bench.tgt), balance, bench.settings.seed,
                       bench.settings.progress, name, probes)
    return net, run


def _late(run: RoutedRun, key: str) -> float:
    """Mean over the MoE layers and over the last quarter of the probes: the load state training reached."""
    probes = run.probes[-max(1, len(run.probes) // 4):]
    return sum(mean_over_layers(p, key) for p in probes) / len(probes)


def _load_summary(run: RoutedRun) -> dict[str, float]:
    """The load of a run (means over the MoE layers): its entropy averaged over all the probes (the balance
    the experts trained under), at its lowest, and at the end (:func:`_late`); the busiest expert's share
    at its highest and at the end."""
    entropy = [mean_over_layers(p, "load_entropy") for p in run.probes]
    return {"mean_load_entropy": sum(entropy) / len(entropy), "min_load_entropy": min(entropy),
            "load_entropy": _late(run, "load_entropy"),
            "peak_max_load": max(mean_over_layers(p, "max_load") for p in run.probes),
            "max_load": _late(run, "max_load")}


def _quality(bench: Bench, net: nn.Module, run: RoutedRun) -> dict[str, float]:
    """Dropped share and loss in training mode (capacity on), then the dropless held-out loss and test BLEU."""
    last = run.probes[-1]
    limit = max(10, round(100 * min(bench.settings.scale, 1.0)))
    return {"dropped": mean_over_layers(last, "dropped"), "loss_with_capacity": last["loss"],
            "loss": held_out_loss(net, bench.src, bench.tgt, bench.pad),
            "bleu": bleu(net, bench.data, "test", limit=limit)["bleu"]}


def _curves(run: RoutedRun) -> dict:
    return {"steps": run.probe_steps, "loss": run.loss,
            "load": {name: [p["layers"][name]["load"] for p in run.probes] for name in run.probes[0]["layers"]},
            "load_entropy": [mean_over_layers(p, "load_entropy") for p in run.probes],
            "max_load": [mean_over_layers(p, "max_load") for p in run.probes]}


def balance_experiment(bench: Bench) -> dict:
    """Top-1 routing (Switch) trained with and without the balancing loss, dropless: a capacity drops an
    overloaded expert's overflow, which then pulls no gradient towards it, and so hides much of the collapse
    (in trials here, at factor 1.25 the entropy gap between the two runs was several times smaller)."""
    out = {}
    for name, weight in (("without", 0.0), ("with", BALANCE)):
        _, run = _trained(bench, f"top-1 {name} balance", weight, k=1, dropless=True)
        out[name] = {"balance_weight": weight, **_load_summary(run),
                     "final_loss": sum(run.loss[-10:]) / len(run.loss[-10:]), "curves": _curves(run)}
    return out


def capacity_experiment(bench: Bench) -> tuple[list[dict], dict]:
    """Top-2 at each capacity factor and top-1 at the default one (all with the balancing loss): dropped
    share, quality, and the causal probe of both capacity policies on each trained model."""
    src, tgt_in = bench.src, bench.tgt[:, :-1]  # decoder inputs, bos first
    positions = list(range(tgt_in.shape[1] - 1))
    rows, top1 = [], {}
    for k, factor in [(2, f) for f in FACTORS] + [(1, 1.25)]:
        # only the end state matters here: fewer probes (the last quarter of them is the final two)
        net, run = _trained(bench, f"top-{k} factor {factor}", probes=8, k=k, capacity_factor=factor)
        row = {"k": k, "factor": factor, **_quality(bench, net, run), "leak": leak(net, src, tgt_in, positions),
               "load_entropy": _late(run, "load_entropy")}
        if k == 2:
            rows.append(row)
        else:
            top1 = row
    return rows, top1


def run(settings: LabSettings) -> LessonResult:
    """Train the small MoE translation model under each routing setting and measure load, drops and leaks."""
    data = translation_data(3000, seed=settings.seed)
    src, tgt = batch(data, data.pairs["valid"][:64])
    bench = Bench(data, src, tgt, settings.steps(800, 200), settings)
    balance = balance_experiment(bench)
    sweep, top1 = capacity_experiment(bench)
    findings = _findings(balance, sweep, top1, bench.steps)
    figures = [_plot_load(balance, settings.out / "moe_load.png"),
               _plot_capacity(findings, settings.out / "moe_capacity.png")]
    return LessonResult(_verdict(findings), findings["holds"], findings, _body(findings), figures,
                        _verdict(findings, "zh"), _body(findings, "zh"))


def _findings(balance: dict, sweep: list[dict], top1: dict, steps: int) -> dict:
    default = next(r for r in sweep if r["factor"] == 1.25)
    dropped = [r["dropped"] for r in sweep]
    checks = {
        f"the balancing loss raises the load entropy over training by > {COLLAPSE} nats":
            balance["with"]["mean_load_entropy"] - balance["without"]["mean_load_entropy"] > COLLAPSE,
        "and at the end of training": balance["with"]["load_entropy"] > balance["without"]["load_entropy"],
        "fewer assignments are dropped at a larger capacity factor": dropped[0] > dropped[-1],
        "the batch-ranked policy leaks the future (factor 1.25)": default["leak"]["batch_ranked"] > 0,
        "the package's policy leaks nothing, to the bit (every model)":
            all(r["leak"]["causal"] == 0.0 for r in (*sweep, top1)),
    }
    return {"experts": EXPERTS, "width": WIDTH, "steps": steps, "balance_weight": BALANCE, "z_weight": Z_WEIGHT,
            "ln_experts": math.log(EXPERTS), "balance": balance, "capacity": sweep, "top1": top1,
            "checks": checks, "holds": all(checks.values())}


def _verdict(f: dict, lang: str = "en") -> tuple[str, str]:
    """Two lines from the findings' numbers (their wording follows the measured direction), in ``lang``."""
    without, with_ = f["balance"]["without"], f["balance"]["with"]
    collapsed = with_["mean_load_entropy"] - without["mean_load_entropy"] > COLLAPSE
    low, high = f["capacity"][0], f["capacity"][-1]
    default, top1 = next(r for r in f["capacity"] if r["factor"] == 1.25), f["top1"]
    leak_ = default["leak"]
    causal = max(r["leak"]["causal"] for r in (*f["capacity"], top1))
    if lang == "zh":
        return (
            f"没有负载均衡损失时，top-1 路由器的负载{'坍缩了' if collapsed else '没有坍缩'}：训练过程中负载熵为 "
            f"{without['mean_load_entropy']:.2f} nats，有均衡损失时为 {with_['mean_load_entropy']:.2f}（均匀分配：ln "
            f"{f['experts']} = {f['ln_experts']:.2f}；训练结束时 {without['load_entropy']:.2f} 对 "
            f"{with_['load_entropy']:.2f}），最忙的专家最多接下 {without['peak_max_load']:.0%} 的 token，"
            "有均衡损失时为 "
            f"{with_['peak_max_load']:.0%}；top-2 在容量因子 {low['factor']:g} 下丢弃 {low['dropped']:.0%} 的分配"
            f"（BLEU {low['bleu']:.1f}），在 {high['factor']:g} 下丢弃 {high['dropped']:.0%}（BLEU {high['bleu']:.1f}）"
            "；"
            f"容量因子 1.25 时 top-1 丢弃 {top1['dropped']:.0%}（BLEU {top1['bleu']:.1f}），top-2 丢弃 "
            f"{default['dropped']:.0%}（BLEU {default['bleu']:.1f}）。",
            f"把整批的分配放在一起排序（先排所有第一选择）{'会泄漏' if leak_['batch_ranked'] > 0 else '这次没有泄漏'}"
            f"未来信息：改变位置 t 之后的目标，位置 <= t 的 logits 最多变化 {leak_['batch_ranked']:.3g}"
            f"（{leak_['positions']} 个位置 t 中有 {leak_['batch_ranked_positions_moved']} 个受影响），而本库按句子、"
            f"按位置顺序计算的容量只有 {causal:.3g}：保留负载均衡损失，并让容量只能被同一句子中更早的 token 占用。",
        )
    first = (f"Without the balancing loss the top-1 router's load {'collapses' if collapsed else 'does not collapse'}: "
             f"load entropy {without['mean_load_entropy']:.2f} vs {with_['mean_load_entropy']:.2f} nats with it over "
             f"training (uniform: ln {f['experts']} = {f['ln_experts']:.2f}; at the end {without['load_entropy']:.2f} "
             f"vs {with_['load_entropy']:.2f}), busiest expert up to {without['peak_max_load']:.0%} vs "
             f"{with_['peak_max_load']:.0%} of tokens; top-2 at capacity factor {low['factor']:g} drops "
             f"{low['dropped']:.0%} of assignments (BLEU {low['bleu']:.1f}), at {high['factor']:g} "
             f"{high['dropped']:.0%} (BLEU {high['bleu']:.1f}); at 1.25 top-1 drops {top1['dropped']:.0%} "
             f"(BLEU {top1['bleu']:.1f}), top-2 {default['dropped']:.0%} (BLEU {default['bleu']:.1f}).")
    second = (f"Ranking the whole batch's assignments together (first choices first) "
              f"{'leaks' if leak_['batch_ranked'] > 0 else 'did not leak'} the future: changing the target after "
              f"position t moves the logits at <= t by up to {leak_['batch_ranked']:.3g} "
              f"({leak_['batch_ranked_positions_moved']} of {leak_['positions']} positions t), against "
              f"{causal:.3g} with the package's per-sequence, position-order capacity: keep the balancing loss and "
              "a capacity that only earlier tokens of the same sentence can fill.")
    return first, second


# The Chinese of the tables' headings and words.
WORDS_ZH = {"top-1, dropless": "top-1，不丢弃", "without": "无", "with": "有", "balance weight": "均衡损失权重",
            "load entropy, mean over training": "负载熵，训练中均值", "load entropy, lowest": "负载熵，最低",
            "load entropy, end": "负载熵，结束时", "busiest expert, highest": "最忙专家，最高",
            "busiest expert, end": "最忙专家，结束时", "final training loss": "最终训练损失", "routing": "路由",
            "capacity factor": "容量因子", "dropped": "丢弃比例", "held-out loss, capacity on": "留出集损失，开启容量",
            "held-out loss, dropless": "留出集损失，不丢弃", "test BLEU": "测试集 BLEU", "load entropy": "负载熵",
            "leak, batch-ranked": "泄漏，整批排序", "leak, per sequence": "泄漏，按句子", "direction": "方向",
            "seen": "观察到"}


def _body(f: dict, lang: str = "en") -> str:
    """The markdown between the verdict and the plots, in ``lang`` ("en" or "zh"): tables built once, relabelled."""
    b = f["balance"]
    balance = [{"top-1, dropless": name, "balance weight": b[name]["balance_weight"],
                "load entropy, mean over training": b[name]["mean_load_entropy"],
                "load entropy, lowest": b[name]["min_load_entropy"], "load entropy, end": b[name]["load_entropy"],
                "busiest expert, highest": b[name]["peak_max_load"], "busiest expert, end": b[name]["max_load"],
                "final training loss": b[name]["final_loss"]} for name in ("without", "with")]
    capacity = [{"routing": f"top-{r['k']}", "capacity factor": r["factor"], "dropped": r["dropped"],
                 "held-out loss, capacity on": r["loss_with_capacity"], "held-out loss, dropless": r["loss"],
                 "test BLEU": r["bleu"], "load entropy": r["load_entropy"],
                 "leak, batch-ranked": r["leak"]["batch_ranked"], "leak, per sequence": r["leak"]["causal"]}
                for r in (*f["capacity"], f["top1"])]
    checks = [{"direction": k, "seen": "✓" if v else "✗"} for k, v in f["checks"].items()]
    if lang == "zh":
        balance, capacity, checks = (translated(rows, WORDS_ZH) for rows in (balance, capacity, checks))
        return "\n\n".join([
            "## 模型与训练预算",
            f"实验室的小 Transformer，宽度 {f['width']}（2 + 2 层，4 个头），编码器和解码器第 1 层的前馈网络换成 "
            f"`zoo.moe.MoEFFN`，含 {f['experts']} 个宽度 {2 * f['width']} 的专家；{f['steps']} 步 Adam，每批 32 句"
            f"（先预热，再线性衰减），损失 = 任务损失 + z-loss {f['z_weight']:g} + 均衡损失 × 下表中的权重。"
            "负载和丢弃比例在 64 个留出句子上以训练模式（开启容量）测量，每次运行约 25 次（容量实验中 8 次），"
            "取两个 MoE 层的平均；“结束时”是最后四分之一次测量的均值。",
            "## 1. 负载均衡（top-1，不设容量，坍缩无处可藏）",
            markdown_table(balance),
            "## 2-3. 容量因子，top-1 与 top-2（开启均衡损失）",
            markdown_table(capacity),
            "评估时不丢弃，所以不丢弃的损失和 BLEU 反映训练中的丢弃让权重付出了多少代价；开启容量的损失是训练批次"
            "实际看到的。top-1 每个 token 只跑一个专家：专家部分的 FLOPs 是 top-2 的一半，每句的容量 "
            "⌈factor · N / E⌉ 也只有一半。",
            "## 4. 谁在争抢一个名额",
            "泄漏由 `zoo.analysis.probes.causal_leak` 在留出批次上测量，用训练好的权重、训练模式：把位置 t 之后的"
            "每个目标 token 都换掉，取所有 t 中位置 <= t 的 logits 的最大变化。*整批排序*：每个专家为整个批次排一个"
            "队，所有第一选择排在任何第二选择之前（`batch_ranked_dispatch`，实验室里的开关）；*按句子*：本库的容量，"
            "在每个句子内按位置顺序计数。两者的专家缓冲区相同，也都不路由填充位置。",
            "## 方向", markdown_table(checks),
        ])
    return "\n\n".join([
        "## The model and the budget",
        f"The lab's tiny Transformer at width {f['width']} (2 + 2 layers, 4 heads) whose FFN in layer 1 of the "
        f"encoder and of the decoder is `zoo.moe.MoEFFN` with {f['experts']} experts of width {2 * f['width']}; "
        f"{f['steps']} Adam steps of 32 sentences (warm-up, then linear decay), task loss + z-loss "
        f"{f['z_weight']:g} + balance loss × the weight below. Load and dropped share are measured on 64 held-out "
        "sentences in training mode (capacity on) about 25 times per run (8 in the capacity runs), averaged over "
        "the two MoE layers; \"end\" is the mean of the last quarter of those probes.",
        "## 1. Load balance (top-1, no capacity to hide a collapse)",
        markdown_table(balance),
        "## 2-3. Capacity factor, top-1 vs top-2 (balance loss on)",
        markdown_table(capacity),
        "Evaluation is dropless, so the dropless loss and BLEU show what the drops of training cost the weights; "
        "the loss with capacity on is what the training batches saw. Top-1 runs one expert per token: half the "
        "expert FLOPs of top-2, and its capacity ⌈factor · N / E⌉ per sequence is half as large.",
        "## 4. Who competes for a slot",
        "The leak is `zoo.analysis.probes.causal_leak` on the held-out batch, the trained weights in training mode: "
        "every "
        "target token after position t is replaced, and the largest change of the logits at positions <= t is "
        "taken over every t. *Batch-ranked*: one queue per expert for the whole batch, every first choice before "
        "any second choice (`batch_ranked_dispatch`, a lab switch); *per sequence*: the package's capacity, "
        "counted per sentence in position order. Both keep the same expert buffers and never route padding.",
        "## Directions", markdown_table(checks),
    ])


POLICY_COLOURS = {"batch_ranked": "C3", "causal": "C0"}


def _plot_load(balance: dict, path) -> str:
    fig, axes = figure(2, 2, width=5.0, height=3.4)
    layer = "decoder.layers.1.ffn"
    for ax, name in zip(axes[0], ("without", "with")):
        curves = balance[name]["curves"]
        loads = torch.tensor(curves["load"][layer])  # (probes, E)
        ax.stackplot(curves["steps"], loads.t().numpy(), labels=[f"expert {e}" for e in range(loads.shape[1])])
        ax.set(xlabel="step", ylabel="share of tokens", ylim=(0, 1),
               title=f"decoder MoE load, {name} balance loss")
    axes[0][1].legend(fontsize=6, loc="upper right", ncol=2)
    for ax, key, title in ((axes[1][0], "load_entropy", "load entropy (nats), mean of the 2 MoE layers"),
                           (axes[1][1], "max_load", "busiest expert's share")):
        for name, colour in (("without", "C3"), ("with", "C0")):
            curves = balance[name]["curves"]
            ax.plot(curves["steps"], curves[key], "o-", color=colour, markersize=3, label=f"{name} balance loss")
        ax.set(xlabel="step", title=title)
        ax.legend(fontsize=8)
    axes[1][0].axhline(math.log(EXPERTS), color="grey", linestyle=":", label="uniform")
    axes[1][1].axhline(1 / EXPERTS, color="grey", linestyle=":")
    return save(fig, path)


def _plot_capacity(f: dict, path) -> str:
    fig, axes = figure(1, 3, width=4.4, height=3.4)
    factors = [r["factor"] for r in f["capacity"]]
    top1 = f["top1"]
    for ax, key, title in ((axes[0][0], "dropped", "dropped assignments"),
                           (axes[0][1], "bleu", "test BLEU (dropless evaluation)")):
        ax.plot(factors, [r[key] for r in f["capacity"]], "o-", color="C0", label="top-2")
        ax.plot([top1["factor"]], [top1[key]], "s", color="C1", label="top-1")
        ax.set(xlabel="capacity factor", title=title)
        ax.legend(fontsize=8)
    ax = axes[0][2]
    xs = torch.arange(len(factors)).numpy()
    for shift, (policy, colour) in zip((-0.2, 0.2), POLICY_COLOURS.items()):
        label = "whole batch ranked" if policy == "batch_ranked" else "per sequence (package)"
        ax.bar(xs + shift, [r["leak"][policy] for r in f["capacity"]], 0.4, color=colour, label=label)
    ax.set_xticks(xs, [f"{x:g}" for x in factors])
    ax.set(xlabel="capacity factor (top-2)", title="max |Δ logits| at <= t, later target changed")
    ax.legend(fontsize=8)
    return save(fig, path)
