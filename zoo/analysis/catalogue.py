"""The catalogue of registered variants: ``zoo list``'s rows and the site's index (paper, parts changed, tasks,
parameters per preset, counted on the meta device)."""

from __future__ import annotations

import torch

from zoo.registry import list_variants, registrations


def variant_rows(task: str | None = None) -> list[dict]:
    """One row per registered variant: paper, parts changed, tasks, parameters per preset."""
    rows = []
    for variant in [v for n in list_variants(task) for v in registrations(n)]:  # a name may serve several tasks
        if task is not None and task not in variant.tasks:
            continue
        name = variant.name
        params = {}
        for preset in variant.presets:
            with torch.device("meta"):  # shapes only: no memory, no initialisation cost
                model = variant.build(variant.config(preset))
            params[preset] = sum(p.numel() for p in model.parameters())
        rows.append({
            "name": name,
            "paper": {"title": variant.paper.title, "year": variant.paper.year, "url": variant.paper.url},
            "parts_changed": list(variant.parts_changed),
            "tasks": list(variant.tasks),
            "spatial_dims": getattr(variant, "spatial_dims", 2),  # 3: trained on 3D patches (medseg)
            "parameters": params,
            "summary": variant.summary,
        })
    return rows


def millions(n: int) -> str:
    """``1.23M`` or ``45.6k``: a parameter count as the tables write it."""
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}k"


def variants_markdown(rows: list[dict]) -> str:
    """The rows as the README's and the site's markdown table."""
    lines = ["| variant | paper | parts changed | tasks | parameters per preset |", "|---|---|---|---|---|"]
    for r in rows:
        paper = f"[{r['paper']['title']}]({r['paper']['url']}) ({r['paper']['year']})"
        params = ", ".join(f"{k} {millions(v)}" for k, v in r["parameters"].items())
        tasks = ", ".join(r["tasks"]) + (" (3D)" if r["spatial_dims"] == 3 else "")
        lines.append(f"| `{r['name']}` | {paper} | {', '.join(r['parts_changed']) or '(the base)'} "
                     f"| {tasks} | {params} |")
    return "\n".join(lines)
