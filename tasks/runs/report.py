"""Human-readable outputs of a run: the curve plot, ``report.md`` and the end-of-run summary table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plumbing.tables import markdown_table
from tasks.engine.mfu import utilisation_line


def plot_curves(history: list[dict[str, Any]], main_metric: str, path: Path) -> None:
    """Training loss and the main validation metric per epoch, side by side."""
    if not history:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [row["epoch"] for row in history]
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax_loss.plot(epochs, [row["train_loss"] for row in history], marker="o")
    ax_loss.set(xlabel="epoch", ylabel="training loss", title="loss")
    ax_metric.plot(epochs, [row[main_metric] for row in history], marker="o", color="tab:green")
    ax_metric.set(xlabel="epoch", ylabel=main_metric, title=f"validation {main_metric}")
    for ax in (ax_loss, ax_metric):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(path: Path, config, summary: dict[str, Any], task_section: str) -> None:
    c = config
    setup = "\n".join(f"- **{k}**: `{v}`" for k, v in c.to_dict().items() if v not in (None, ""))
    history = markdown_table(summary["history"])
    flops = utilisation_line(summary.get("utilisation"))
    flops = f"\n- **training FLOP/s**: {flops}" if flops else ""
    curves = "\n\n![curves](curves.png)" if c.figures else ""  # --figures false: no plot was drawn
    text = f"""# {summary['task']} · {summary['variant']}

## Setup
{setup}
- **parameters**: {summary['parameters']:,}
- **training time**: {summary['train_seconds']:.0f} s for {summary['epochs']} epochs{flops}

## Validation per epoch
{history}{curves}

{task_section}
"""
    path.write_text(text)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The short table printed at the end of ``zoo train``."""
    lines = [
        f"{summary['task']} / {summary['variant']}: {summary['epochs']} epochs in {summary['train_seconds']:.0f} s, "
        f"{summary['parameters']:,} parameters",
        f"best validation {summary['main_metric']}: {summary['best_valid']:.4g}",
    ]
    if summary.get("utilisation"):
        lines.append("training " + utilisation_line(summary["utilisation"]))
    for split, metrics in summary.get("final", {}).items():
        if isinstance(metrics, dict):
            shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float)))
            lines.append(f"{split:<12} {shown}")
    return lines
