"""Check 5: the initialisation, and activations and gradients layer by layer at the first step.

* **weight std per projection** against what the model's declared scheme draws (``config.init``,
  :mod:`core.init`): Xavier-uniform √(2/(fan_in + fan_out)) (the packed ``qkv`` weight is one (3D, D) matrix,
  and its Q, K and V row blocks are reported apart), N(0, 0.02²), or PyTorch's default 1/√(3·fan_in);
* **activations**: the std of every encoder/decoder layer's output on the batch;
* **gradients**: the norm of every layer's parameter gradient after one backward pass of the loss.

Thresholds (at initialisation only: training moves the weights on purpose): a projection whose std is more than
3× from its scheme's (a sample std of thousands of entries is within a few % of it); a last/first layer gradient
ratio in a stack above 10 (the lab's tiny Post-LN models measure ~2 at depth 6, ~6 at 12 and ~40 at 24, Pre-LN
< 1 at every depth: Xiong et al. 2020) or below 1/100 (vanishing); a last/first activation std ratio above 10.

Shape legend: L layers per stack.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from torch import nn

from core.layers import ResidualLayer
from core.multihead import MultiHeadAttention
from zoo.analysis.doctor.batch import Batch, loss
from zoo.analysis.doctor.findings import CheckResult, Finding

STD_FACTOR = 3.0
GRAD_GROWTH = 10.0
GRAD_VANISH = 1e-2
ACT_GROWTH = 10.0


def expected_std(weight: torch.Tensor, module: nn.Module, scheme: str, std: float = 0.02) -> float:
    """The std :func:`core.init.init_weights` draws ``weight`` of ``module`` (Linear or Embedding) with."""
    fan_out, fan_in = weight.shape[0], weight.shape[1]
    if scheme == "xavier":
        return math.sqrt(2.0 / (fan_in + fan_out))
    if scheme == "normal":
        return std
    return 1.0 if isinstance(module, nn.Embedding) else 1.0 / math.sqrt(3.0 * fan_in)  # torch's defaults


@torch.no_grad()
def weight_stds(model: nn.Module, scheme: str) -> list[dict]:
    """One row per projection (Q, K, V blocks of ``qkv`` apart): its std, the scheme's, and their ratio."""
    rows, seen = [], set()
    for name, module in model.named_modules():
        if not isinstance(module, (nn.Linear, nn.Embedding)) or id(module.weight) in seen:
            continue
        seen.add(id(module.weight))
        weight = module.weight.detach().float()
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            weight = torch.cat((weight[: module.padding_idx], weight[module.padding_idx + 1 :]))  # the pad row is 0
        want = expected_std(module.weight, module, scheme)
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        if name.endswith("qkv") and isinstance(model.get_submodule(parent), MultiHeadAttention):
            blocks = zip("QKV", weight.chunk(3))
        else:
            blocks = [("", weight)]
        for label, block in blocks:
            got = float(block.std())
            rows.append({"projection": f"{name}[{label}]" if label else name, "std": got, "expected": want,
                         "ratio": got / want})
    return rows


def layer_stacks(model: nn.Module) -> dict[str, list[tuple[str, nn.Module]]]:
    """The residual layers of ``model`` grouped by their stack (``encoder.layers``, ``decoder.layers``...)."""
    stacks: dict[str, list] = defaultdict(list)
    for name, module in model.named_modules():
        if isinstance(module, ResidualLayer):
            stacks[name.rsplit(".", 1)[0] if "." in name else ""].append((name, module))
    return dict(stacks)


def depth_profile(model: nn.Module, batch: Batch) -> dict:
    """Loss, per-layer output std and parameter-gradient norm after one forward/backward on ``batch``.
    Gradients are cleared afterwards (``set_to_none``), so a training step that follows is unaffected."""
    stacks = layer_stacks(model)
    activations: dict[str, float] = {}

    def record(name: str, out) -> None:
        activations[name] = float(out.detach().float().std())

    handles = [m.register_forward_hook(lambda m, a, out, name=name: record(name, out))
               for layers in stacks.values() for name, m in layers]
    model.zero_grad(set_to_none=True)
    try:
        value = loss(model, batch)
        if torch.isfinite(value):
            value.backward()
    finally:
        for handle in handles:
            handle.remove()
    grads = {}
    for layers in stacks.values():
        for name, m in layers:
            norms = [p.grad.float().norm() for p in m.parameters() if p.grad is not None]
            grads[name] = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
    total = [p.grad.float().norm() for p in model.parameters() if p.grad is not None]
    grad_norm = float(torch.linalg.vector_norm(torch.stack(total))) if total else math.nan
    model.zero_grad(set_to_none=True)
    return {"loss": float(value.detach()), "grad_norm": grad_norm, "activation_std": activations,
            "grad_norm_by_layer": grads,
            "stacks": {s: [n for n, _ in layers] for s, layers in stacks.items()},
            "post_ln": {s: not layers[0][1].norm_first for s, layers in stacks.items()}}


def init_checks(model: nn.Module, batch: Batch, trained: bool, warmup_steps: int | None) -> CheckResult:
    """Check 5 (see the module docstring). ``warmup_steps``: the schedule's warm-up, when known."""
    result = CheckResult("init", thresholds={
        "weight std": f"outside [1/{STD_FACTOR:g}, {STD_FACTOR:g}]× the declared scheme's (at initialisation)",
        "gradient by depth": f"last/first layer ‖∇‖ in a stack > {GRAD_GROWTH:g} or < {GRAD_VANISH:g} (at "
                             "initialisation)",
        "activations by depth": f"last/first layer output std > {ACT_GROWTH:g} (at initialisation)",
        "non-finite": "a NaN/inf loss or gradient"})
    m = result.measured
    scheme = getattr(getattr(model, "config", None), "init", None)
    m["scheme"] = scheme
    if scheme in ("xavier", "normal", "torch"):
        m["weights"] = weight_stds(model, scheme)
    profile = depth_profile(model, batch)
    m.update(profile)
    if not (math.isfinite(profile["loss"]) and math.isfinite(profile["grad_norm"])):
        result.add(Finding("init", "non-finite loss or gradient on the first batch",
                           f"loss {profile['loss']}, gradient norm {profile['grad_norm']}",
                           "overflowing weights or activations (a huge init, a division by zero, fp16 overflow)",
                           "check the init scheme and the inputs; train in float32 or bf16", "critical",
                           math.inf, 0.0))
        return result
    if trained:
        return result
    bad = [r for r in m.get("weights", []) if not 1 / STD_FACTOR <= r["ratio"] <= STD_FACTOR]
    if bad:
        worst = max(bad, key=lambda r: abs(math.log(r["ratio"])))
        qkv = all("[" in r["projection"] for r in bad)
        result.add(Finding(
            "init", f"{'Q/K/V' if qkv else 'weight'} initialisation off its scheme",
            f"{len(bad)} projections off; worst {worst['projection']} std {worst['std']:.3g} vs "
            f"{worst['expected']:.3g} ({scheme}), {worst['ratio']:.1f}×",
            "weights redrawn with a fixed std that ignores the fan-in (e.g. N(0, 1))",
            f"initialise with core.init.init_weights(model, '{scheme}') (Xavier: std √(2/(fan_in+fan_out)))",
            "error", worst["ratio"], STD_FACTOR if worst["ratio"] > 1 else 1 / STD_FACTOR, worst["projection"]))
    for stack, names in profile["stacks"].items():
        if len(names) < 2:
            continue
        g = [profile["grad_norm_by_layer"][n] for n in names]
        a = [profile["activation_std"][n] for n in names]
        ratio = g[-1] / g[0] if g[0] > 0 else math.inf
        m.setdefault("grad_ratio", {})[stack] = ratio
        m.setdefault("activation_ratio", {})[stack] = a[-1] / a[0] if a[0] > 0 else math.inf
        post_ln = profile["post_ln"][stack]
        if ratio > GRAD_GROWTH:
            no_warmup = warmup_steps is not None and warmup_steps <= 1
            result.add(Finding(
                "init", "gradients grow toward the output" + (" with no warm-up" if no_warmup else ""),
                f"last/first layer ‖∇‖ = {ratio:.1f} in {stack} ({len(names)} layers: {g[0]:.2g} → {g[-1]:.2g})"
                + ("; the schedule has no warm-up" if no_warmup else ""),
                f"Post-LN at depth {len(names)}: the layers near the output get the large gradients (Xiong et al. "
                "2020), and large first steps throw them off" if post_ln else "a stack whose output layers dominate",
                "warm up the learning rate (--warmup, e.g. 4000 steps as the paper) or put the norm first "
                "(--variant pre-ln / norm_first=True)", "error" if no_warmup else "warning", ratio, GRAD_GROWTH,
                names[-1]))
        elif ratio < GRAD_VANISH:
            result.add(Finding(
                "init", "gradients vanish toward the input", f"first/last layer ‖∇‖ = {1 / ratio:.3g} in {stack}",
                "a deep stack without a clean residual path", "Pre-LN (norm_first=True) or a smaller depth",
                "warning", ratio, GRAD_VANISH, names[0]))
        if a[-1] / max(a[0], 1e-12) > ACT_GROWTH:
            result.add(Finding(
                "init", "activations grow through depth", f"last/first layer output std {a[-1] / a[0]:.1f} in {stack}",
                "residual branches that add up without normalisation (Pre-LN at depth, large init)",
                "scale the residual branches' output projections by 1/√(2L) or use a final norm", "warning",
                a[-1] / a[0], ACT_GROWTH, names[-1]))
    return result
