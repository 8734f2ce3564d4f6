"""One figure per check that ran: ``doctor_<check>.png`` next to ``doctor.md``."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from zoo.analysis.doctor.findings import CheckResult, Diagnosis


def _figure(ncols: int, width: float = 4.8, height: float = 3.4):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, axes[0]


def _save(fig, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def _short(name: str) -> str:
    return name.replace("encoder.layers.", "enc").replace("decoder.layers.", "dec").replace("self_attn", "self") \
        .replace("cross_attn", "cross")


def _heatmap(ax, layers: dict[str, dict], key: str, title: str, vmax: float = 1.0) -> None:
    names = [n for n, s in layers.items() if key in s]
    heads = max(len(layers[n][key]) for n in names)
    grid = [[layers[n][key][h] if h < len(layers[n][key]) else math.nan for h in range(heads)] for n in names]
    image = ax.imshow(grid, aspect="auto", vmin=0, vmax=vmax, cmap="viridis")
    ax.set_yticks(range(len(names)), [_short(n) for n in names], fontsize=7)
    ax.set_xticks(range(heads))
    ax.set(xlabel="head", title=title)
    ax.figure.colorbar(image, ax=ax)


def _attention(check: CheckResult):
    fig, (left, right) = _figure(2)
    _heatmap(left, check.measured["layers"], "entropy", "attention entropy / uniform entropy")
    _heatmap(right, check.measured["layers"], "saturation", "share of rows with max weight > 0.99")
    return fig


def _score_scale(check: CheckResult):
    m = check.measured
    panels = 3 if "temperature_losses" in m else 2
    fig, axes = _figure(panels)
    layers = {n: s for n, s in m["layers"].items() if "score_variance" in s}
    names = list(layers)
    axes[0].barh([_short(n) for n in names], [layers[n]["effective_scale"] for n in names])
    axes[0].axvline(1.0, color="grey", ls=":")
    axes[0].set(xlabel="effective scale (1 = softmax(q·k/√d_k))", title="slope of log-weights vs q·k/√d_k")
    axes[0].tick_params(axis="y", labelsize=7)
    axes[1].barh([_short(n) for n in names], [max(layers[n]["score_variance"]) for n in names])
    axes[1].set(xscale="log", xlabel="largest within-row Var(q·k/√d_k) over heads", title="score variance")
    axes[1].axvline(1.0, color="grey", ls=":")
    axes[1].tick_params(axis="y", labelsize=7)
    if panels == 3:
        taus = [float(t) for t in m["temperature_losses"]]
        axes[2].plot(taus, list(m["temperature_losses"].values()), "o-")
        axes[2].set(xscale="log", xlabel="every score × τ", ylabel="loss", title="temperature probe")
        axes[2].axvline(1.0, color="grey", ls=":")
    return fig


def _mask(check: CheckResult):
    m = check.measured
    fig, (left, right) = _figure(2)
    padding = {"padding": m["padding_leak"]} if "padding_leak" in m else {}  # none in a batch without pads
    labels = [f"causal t={t}" for t in m["causal_leak"]] + list(padding)
    values = [max(v, 1e-12) for v in [*m["causal_leak"].values(), *padding.values()]]
    left.bar(labels, values, color=["C3" if v > 1e-4 else "C0" for v in values])
    left.axhline(1e-4, color="grey", ls=":", label="threshold")
    left.set(yscale="log", ylabel="relative output drift", title="perturbation probes")
    left.legend()
    by_layer = {**m.get("causal_leak_by_layer", {}), **m.get("padding_leak_by_layer", {})}
    if by_layer:
        right.barh([_short(n) for n in by_layer], [max(v, 1e-12) for v in by_layer.values()])
        right.axvline(1e-4, color="grey", ls=":")
        right.set(xscale="log", xlabel="relative drift of the layer's output", title="where the leak enters")
    else:
        weights = m.get("weight_on_forbidden_keys", {})
        right.barh([_short(n) for n in weights], list(weights.values()))
        right.set(xlabel="max attention weight on forbidden keys", title="weight where the mask forbids")
    right.tick_params(axis="y", labelsize=7)
    return fig


def _position(check: CheckResult):
    m = check.measured
    fig, (left, right) = _figure(2)
    values = {"encoder: permuted input": m["encoder_permutation_gap"]}
    if "decoder_position_gap" in m:
        values["decoder: positions removed"] = m["decoder_position_gap"]
    left.bar(list(values), [max(v, 1e-12) for v in values.values()])
    left.axhline(1e-4, color="grey", ls=":", label="equivariant below")
    left.set(yscale="log", ylabel="relative output change", title="does order change the outputs?")
    left.legend()
    if "ratio" in m:
        right.bar(["position signal", "token embeddings"], [m["position_norm"], m["token_norm"]])
        right.set(ylabel="mean row norm", title=f"|position| / |token| = {m['ratio']:.2f}")
    return fig


def _init(check: CheckResult):
    m = check.measured
    fig, axes = _figure(3 if m.get("weights") else 2)
    for stack, names in m["stacks"].items():
        axes[0].plot(range(1, len(names) + 1), [m["grad_norm_by_layer"][n] for n in names], "o-", label=stack)
        axes[1].plot(range(1, len(names) + 1), [m["activation_std"][n] for n in names], "o-", label=stack)
    axes[0].set(yscale="log", xlabel="layer", ylabel="‖∇ layer parameters‖", title="gradient norm by depth")
    axes[1].set(xlabel="layer", ylabel="output std", title="activations by depth")
    axes[1].set_ylim(bottom=0)
    for ax in axes[:2]:
        ax.legend(fontsize=7)
    if m.get("weights"):
        rows = m["weights"]
        axes[2].barh([_short(r["projection"]) for r in rows], [r["ratio"] for r in rows])
        axes[2].axvspan(1 / 3, 3, color="C2", alpha=0.15, label="healthy band")
        ratios = [r["ratio"] for r in rows]
        axes[2].set(xscale="log", xlim=(min(0.1, min(ratios) / 2), max(10.0, max(ratios) * 2)),
                    xlabel=f"std / {m['scheme']} expectation", title="weight std per projection")
        axes[2].tick_params(axis="y", labelsize=5)
    return fig


def _curve(check: CheckResult):
    m = check.measured
    fig, axes = _figure(2 if m.get("step_curve") else 1, width=5.5)
    if m.get("epoch_losses"):
        axes[0].plot(range(1, len(m["epoch_losses"]) + 1), m["epoch_losses"], "o-", label="training loss per epoch")
    axes[0].set(xlabel="epoch", ylabel="loss", title="training curve (metrics.jsonl)")
    if m.get("step_curve"):
        curve, every = m["step_curve"], max(1, m["steps"] // 400)
        axes[1].plot([i * every for i in range(len(curve))], curve, label=f"moving average ({m['smoothing_window']} "
                     "steps)")
        axes[1].axvline(m.get("warmup_end", 0), color="grey", ls=":", label="end of warm-up")
        axes[1].set(xlabel="step", ylabel="loss", title="per-step log (doctor/steps.jsonl)")
    for ax in axes:
        if m.get("plateau") is not None:
            ax.axhline(m["plateau"], color="C3", ls="--", label="unigram plateau")
        ax.legend(fontsize=7)
    return fig


def _generation(check: CheckResult):
    m = check.measured
    fig, (left, right) = _figure(2)
    left.bar(["teacher-forced", "greedy"], [m["teacher_forced_accuracy"], m["greedy_accuracy"]])
    left.set(ylim=(0, 1), ylabel="token accuracy", title="training vs inference")
    first = m["mean_first_error"]
    right.bar(["teacher-forced", "greedy"], [first["teacher_forced"], first["greedy"]])
    right.set(ylabel="mean position of the first error", title=f"{m['early_divergence_share']:.0%} diverge early")
    return fig


DRAWERS: dict[str, Callable[[CheckResult], object]] = {
    "attention": _attention, "score_scale": _score_scale, "mask": _mask, "position": _position, "init": _init,
    "curve": _curve, "generation": _generation}


def draw(d: Diagnosis, out: Path) -> list[str]:
    """Draw every check that ran; return the file names."""
    names = []
    for check in d.checks:
        if check.status == "skipped" or check.name not in DRAWERS:
            continue
        names.append(_save(DRAWERS[check.name](check), out / f"doctor_{check.name}.png"))
    return names
