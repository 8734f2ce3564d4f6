"""``zoo evaluate``: re-score a finished run on a split of its own data or of another compatible folder.

No training: the run's model, with the preprocessing it was trained with, goes through the same final
evaluation the training ran (``Task.final_report``), so on the run's own data and checkpoint the numbers are
the training's own (bit for bit on the CPU), computed in the precision the run trained in (``run.json``'s
``precision``). Writes ``metrics.json``, ``report.md`` and
``predictions/<split>.jsonl`` under the output folder.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from tasks.runs.run import Run


def evaluate_run(run: Run, data: str | Path | None = None, split: str | None = None,
                 out: str | Path | None = None, members: list[Run] | None = None) -> tuple[dict[str, Any], Path]:
    """Score ``run`` on ``split`` (default: the task's test splits) of ``data`` (default: the run's own data).

    ``members``: the runs of an ensemble (``run`` the first; :func:`tasks.runs.ensemble.load_members`), whose
    models the task averages; the default output folder is then their cross-validation folder's.
    Returns the metrics (as the training's ``metrics.json["final"]``) and the output folder.
    """
    task = run.task
    ensemble = members is not None and len(members) > 1
    if ensemble and "members" not in task.predict_options:
        raise ValueError(f"ensembles of {task.name} runs are not supported; evaluate one run")
    if split is not None and split not in task.eval_splits:
        from plumbing.errors import unknown_name

        raise unknown_name(f"split of the {task.name} task", split, task.eval_splits)
    if data is not None:
        data = Path(data)
        if not data.exists():
            raise FileNotFoundError(f"--data {data} does not exist; give the folder of a dataset")
        task.config = dataclasses.replace(task.config, data=str(data))
    home = run.path.parent if ensemble else run.path  # an ensemble's evaluations go in the cross-validation folder
    out = Path(out) if out is not None else home / "evaluations" / _name(data, split)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the evaluation's outputs")
    tic = time.perf_counter()
    task.setup()  # reads the data; keeps the run's preprocessing (tokenizer, normalisation, classes)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with run.context():  # the precision the run trained in
            model = [m.model for m in members] if ensemble else run.model
            metrics, section = task.final_report(model, out, splits=[split] if split else None)
    except (ValueError, FileNotFoundError):  # e.g. a split the data lacks: leave no empty folder behind
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    seconds = time.perf_counter() - tic
    source = str(data) if data is not None else (task.config.data or "the run's own data (embedded default)")
    summary = {"task": task.name, "variant": run.variant, "run": str(run.path), "weights": str(run.weights),
               "data": source, "splits": split or "test", "seconds": seconds, "final": metrics}
    if ensemble:
        summary.update(run=str(home), ensemble=[str(m.path) for m in members],
                       weights=[str(m.weights) for m in members])
    (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n")
    used = (f"- **ensemble**: {len(members)} runs of `{home}` ({', '.join(m.path.name for m in members)}), "
            "their probabilities averaged" if ensemble else f"- **run**: `{run.path}`\n- **weights**: `{run.weights}`")
    header = [f"# {task.name} · {run.variant} · evaluation", "", used, f"- **data**: {source}",
              f"- **time**: {seconds:.1f} s", ""]
    (out / "report.md").write_text("\n".join(header) + "\n" + section + "\n")
    return metrics, out


def _name(data: Path | None, split: str | None) -> str:
    return f"{data.name if data is not None else 'own'}-{split or 'test'}"
