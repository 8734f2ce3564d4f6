"""Cross-validation of the medseg task: ``zoo cv medseg --data DIR --folds 5 [train options]``.

Every fold ``k`` is an ordinary training run in ``OUT/fold_k`` (the shared :class:`~tasks.engine.trainer.Trainer`:
checkpoints, report, run.json, per-case records), trained on the other folds' cases and validated on fold ``k``'s;
the folds are one sweep (:mod:`tasks.sweeps`), trained one after another here or in parallel with ``--launcher``.
The folds are nnU-Net's (sorted case names, KFold seed 12345) unless a ``splits_final.json`` in the data folder, in
``OUT`` or given by ``--splits`` says otherwise; ``OUT/splits_final.json`` holds the folds used, and every fold run
reads it. A rerun reuses each fold that finished with the same settings (every field but those that cannot change a
result, :mod:`tasks.engine.same_run`: epochs included), resumes a fold that stopped after a checkpoint, trains the
others, and refuses a fold folder trained with other settings, naming them.

Why this driver lives here and not beside the sweeps' own (:mod:`tasks.sweeps`): it plans folds from medseg's data
(its case names, layouts and ``splits_final.json``) and summarises them with medseg's metrics (nnU-Net's
``summary.json``), and ``tasks.sweeps`` sits on a floor below the task runners, which it must not import. What is
generic — running the folds as runs, resuming, reusing — is the sweep machinery it calls.

The cross-validation's figure is each fold's validation score (its ``valid`` split; for data without a labelled
test split the fold's ``test`` split, which then is the validation cases). Written to ``OUT``:

- ``cv.json``: per fold its validation cases and Dice / HD95 (both conventions, per class) and the normalised surface
  Dice (NSD, at the run's ``--nsd-tolerance``, named as ``nsd_tolerance_mm``), then over the folds the mean, the
  sample standard deviation, the minimum and the maximum of each;
- ``report.md``: the same as tables;
- ``crossval_summary.json`` (NIfTI data): nnU-Net's ``summary.json`` over the validation cases of every fold
  together, in the original geometry, as nnU-Net's ``crossval_results`` folder holds it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from plumbing.atomic import write_json_atomic, write_text_atomic
from plumbing.tables import markdown_table
from tasks.engine.config import check_folder
from tasks.engine.same_run import setting_differences
from tasks.medseg.config import MedsegConfig
from tasks.medseg.evaluation.metrics import CONVENTIONS, NSD_RULES
from tasks.medseg.evaluation.nnunet_eval import aggregate, summary_lines, write_summary_json
from tasks.medseg.evaluation.report import nsd_column
from tasks.medseg.preprocessing.cases import nifti_options
from tasks.medseg.preprocessing.folds import SPLITS_FILE, resolve_folds, write_splits
from tasks.medseg.reading.data import load_medseg
from tasks.sweeps.driver import run_sweep
from tasks.sweeps.launchers import Launch
from tasks.sweeps.plan import RunSpec
from tasks.sweeps.process import resumable
from tasks.sweeps.state import finished, recorded_config

log = logging.getLogger(__name__)

CV_FILE = "cv.json"
POOLED_FILE = "crossval_summary.json"
HEADLINE = ("dice", "hd95", "dice_mm", "hd95_mm", "nsd", "nnunet_dice")  # nsd: None for folds scored before NSD


def cv_out_dir(config: MedsegConfig) -> Path:
    """``--out``, else ``runs/cv-medseg-<variant>``."""
    return Path(config.out) if config.out else Path("runs") / f"cv-medseg-{config.variant}"


def cross_validate(config: MedsegConfig, launch: Launch | None = None) -> tuple[dict[str, Any], list[str]]:
    """Train (or reuse) every fold asked for (``config.fold``: all when None or ``"all"``) as one sweep (``launch``:
    where; default one after another in this process); returns (the cv.json dict, summary lines to print)."""

    out = cv_out_dir(config)
    folds, splits, source, class_names = plan_folds(config, out)
    wanted = list(range(config.folds)) if config.fold_index is None else [config.fold_index]
    specs, states = [], {}
    for k in wanted:  # each fold a run of the sweep in OUT/fold_k, whose settings fold_state checks
        fold_config = dataclasses.replace(config, fold=str(k), splits=str(splits), out=str(out / f"fold_{k}"),
                                          resume=False)
        states[f"fold_{k}"] = fold_state(fold_config)
        values = {name: v for name, v in fold_config.to_dict().items() if name not in ("out", "resume")}
        specs.append(RunSpec("medseg", f"fold {k}", values, name=f"fold_{k}"))
    settings = {name: v for name, v in config.to_dict().items() if name not in ("task", "out", "resume", "model")}
    sweep = {"kind": "cv", "task": "medseg", "out": str(out), "set": settings, "model_set": dict(config.model)}
    run_sweep(specs, out, launch, sweep, reuse=lambda spec, folder: states[spec.name])
    skipped = [k for k in wanted if states[f"fold_{k}"] == "done"]
    results = [fold_result(k, folds[k]["val"], out / f"fold_{k}",
                           json.loads((out / f"fold_{k}" / "metrics.json").read_text())) for k in wanted]
    summary = {"task": "medseg", "variant": config.variant, "data": source, "folds": config.folds,
               "splits": str(splits), "class_names": class_names, "nsd_tolerance_mm": config.nsd_tolerance,
               "nsd_title": nsd_title(results), "trained": [k for k in wanted if k not in skipped],
               "skipped": skipped, "per_fold": results, "over_folds": over_folds(results, class_names)}
    pooled = pooled_summary(results, len(class_names))
    if pooled is not None:
        write_summary_json(pooled, out / POOLED_FILE)
        summary["pooled_nnunet_dice"] = _finite(pooled["foreground_mean"]["Dice"])
    write_json_atomic(out / CV_FILE, summary)  # whole or not at all, as every file a rerun or zoo predict reads
    lines = report_lines(summary, pooled)
    write_text_atomic(out / "report.md", "\n".join(lines) + "\n")
    return summary, _printed(summary, out)


def plan_folds(config: MedsegConfig, out: Path) -> tuple[list[dict[str, list[str]]], Path, str, list[str]]:
    """The folds of a cross-validation of ``config``'s data, written to ``out/splits_final.json`` (unless they came
    from that file), as ``zoo cv`` and ``zoo compare --folds`` draw them: ``--splits``, else the data folder's
    ``splits_final.json``, else ``out``'s, else nnU-Net's draw
    (:func:`~tasks.medseg.preprocessing.folds.resolve_folds`).
    Every variant of a comparison then trains on the same folds, read from that file.

    Returns:
        (the folds, the split file, the data folder, the class names).

    Raises:
        ValueError: ``out`` holds a training run; the data has its own validation split; more folds than training
            cases; a split file that does not split the data's cases into ``config.folds`` folds.
    """
    check_folder("--out", out, "a new folder, or the folder of an earlier `zoo cv` or `zoo compare --folds`")
    if (out / "run.json").is_file():
        raise ValueError(f"--out {out} holds a training run (run.json); cross-validation writes one run per fold "
                         "under it: give another folder")
    if config.data is not None:
        check_folder("--data", Path(config.data), "the folder that holds the dataset")
    cases, source, class_names = _training_cases(config)
    folds, origin = resolve_folds(cases, config.folds, config.splits, folders=(source, out))
    splits = out / SPLITS_FILE
    if origin is None or origin.resolve() != splits.resolve():
        write_splits(splits, folds)
    return folds, splits, source, class_names


def _training_cases(config: MedsegConfig) -> tuple[list[str], str, list[str]]:
    """(training case names, the data folder, class names), from the data as a fold run reads it (a NIfTI folder's
    cases land in the cache, so that the fold runs read them from there)."""
    data = load_medseg(config.data, config.dataset, **nifti_options(config))
    if data.valid:
        raise ValueError(f"{data.source} has its own validation split ({len(data.valid)} cases); cross-validation "
                         "splits the training cases of layouts without one")
    return [v.case for v in data.train], data.source, list(data.class_names)


def fold_state(config: MedsegConfig) -> str:
    """``"done"`` (finished with these settings), ``"partial"`` (a checkpoint to resume) or ``"new"``.

    A fold is reused only when its recorded settings are the requested ones outside the fields that cannot change a
    result (:mod:`tasks.engine.same_run`): a fold trained for more epochs, compiled, or on another device is another
    run, and is never reported under this command nor overwritten by it.

    Raises:
        ValueError: the fold's folder holds a run trained with other settings (naming the fields and the fix),
            or a finished run whose settings cannot be read.
    """
    folder = Path(config.out)
    if not finished(folder) and not resumable(folder):
        return "new"
    recorded = recorded_config(folder)
    if recorded is None:  # unfinished: --resume checks the settings its checkpoint holds
        return "partial"
    changed = setting_differences(recorded, config.to_dict())
    if changed:
        what = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(changed.items())[:4])
        raise ValueError(f"{folder} was trained with other settings ({what}); rerun zoo cv with the settings it was "
                         f"trained with (its config.json), give it another --out, or move {folder} away to train "
                         "that fold again")
    return "done" if finished(folder) else "partial"


def fold_result(k: int, val: list[str], folder: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    """One fold's validation figures from its training summary (``metrics.json``); the NSD's column title with its
    tolerance (:func:`~tasks.medseg.evaluation.report.nsd_column`, None for a fold scored before NSD)."""
    final = metrics["final"]
    split = "valid" if "valid" in final else "test"
    scores = final[split]
    result = {"fold": k, "folder": str(folder), "split": split, "val": list(val),
              **{m: scores.get(m) for m in HEADLINE}, "nsd_title": nsd_column(scores["conventions"]["mm"]),
              "classes": {c: {row["organ"]: {m: row.get(m) for m in ("dice", "hd95", "nsd")}
                              for row in scores["conventions"][c]["organs"]} for c in CONVENTIONS}}
    summary = folder / "predictions" / split / "summary.json"
    result["summary_json"] = str(summary) if summary.is_file() else None
    if split == "valid":
        result["test"] = {m: final["test"].get(m) for m in HEADLINE}
    return result


def nsd_title(results: list[dict[str, Any]]) -> str | None:
    """The NSD column's title shared by the folds ("NSD @ 1 mm (%)"), or None when no fold scored NSD.

    Raises:
        ValueError: folds scored NSD at different tolerances (or units): their mean would mix two measures.
    """
    titles = {r["nsd_title"] for r in results if r["nsd_title"] is not None}
    if len(titles) > 1:
        raise ValueError(f"the folds scored NSD at different tolerances ({', '.join(sorted(titles))}); train them "
                         "again at one --nsd-tolerance")
    return next(iter(titles), None)


def spread(values: list[float | None]) -> dict[str, Any]:
    """Mean, sample standard deviation (0 for one value), min and max of the finite values, and the values."""
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not kept:
        return {"mean": None, "sd": None, "min": None, "max": None, "values": values}
    sd = float(np.std(kept, ddof=1)) if len(kept) > 1 else 0.0
    return {"mean": float(np.mean(kept)), "sd": sd, "min": min(kept), "max": max(kept), "values": values}


def over_folds(results: list[dict[str, Any]], class_names: list[str]) -> dict[str, Any]:
    """Each headline metric, and each class's Dice, HD95 (and NSD, "mm" convention) per convention, over the folds
    (:func:`spread`)."""
    summary: dict[str, Any] = {m: spread([r[m] for r in results]) for m in HEADLINE}
    summary["classes"] = {c: {name: {metric: spread([r["classes"][c].get(name, {}).get(metric) for r in results])
                                     for metric in ("dice", "hd95", *(("nsd",) if c == "mm" else ()))}
                              for name in class_names[1:]} for c in CONVENTIONS}
    return summary


def pooled_summary(results: list[dict[str, Any]], num_classes: int) -> dict | None:
    """nnU-Net's summary over every fold's validation cases together (from each fold's summary.json), or None when
    a fold has none (data that is not NIfTI)."""
    if not results or any(r["summary_json"] is None for r in results):
        return None
    per_case = []
    for r in results:
        for case in json.loads(Path(r["summary_json"]).read_text())["metric_per_case"]:
            per_case.append({**case, "metrics": {int(k): v for k, v in case["metrics"].items()}})
    return aggregate(per_case, list(range(1, num_classes)))


def report_lines(summary: dict[str, Any], pooled: dict | None) -> list[str]:
    """report.md of the cross-validation."""
    over, names, nsd = summary["over_folds"], summary["class_names"], summary["nsd_title"]
    lines = [f"# medseg · {summary['variant']} · {summary['folds']}-fold cross-validation", "",
             f"- **data**: {summary['data']}", f"- **folds**: {summary['splits']} (nnU-Net's splits_final.json)",
             f"- **trained now**: {summary['trained'] or 'none'}; **finished before, reused**: "
             f"{summary['skipped'] or 'none'}", "",
             "Each fold is scored on its validation cases (Dice %, HD95 in the papers' convention (voxels) and in "
             f"mm, {_nsd_words(nsd)}nnU-Net's Dice in the original geometry); mean ± sample SD over the folds.", "",
             "## Per fold", ""]
    rows = [{"fold": r["fold"], "validation cases": len(r["val"]), "Dice %": _pct(r["dice"]), "HD95": _two(r["hd95"]),
             "Dice % (mm)": _pct(r["dice_mm"]), "HD95 mm": _two(r["hd95_mm"]), **({nsd: _pct(r["nsd"])} if nsd else {}),
             "nnU-Net Dice": _four(r["nnunet_dice"]), "run": r["folder"]} for r in summary["per_fold"]]
    rows.append({"fold": "mean ± SD", "validation cases": sum(len(r["val"]) for r in summary["per_fold"]),
                 "Dice %": _pm(over["dice"], 100), "HD95": _pm(over["hd95"]), "Dice % (mm)": _pm(over["dice_mm"], 100),
                 "HD95 mm": _pm(over["hd95_mm"]), **({nsd: _pm(over["nsd"], 100)} if nsd else {}),
                 "nnU-Net Dice": _pm(over["nnunet_dice"], 1, 4), "run": ""})
    lines += [markdown_table(rows), ""]
    for convention in CONVENTIONS:
        unit = "voxels" if convention == "papers" else "mm"
        lines += [f"## Per class, {convention} convention (HD95 in {unit})", ""]
        class_rows = []
        for name in names[1:]:
            scores = over["classes"][convention][name]
            row = {"class": name}
            row.update({f"fold {r['fold']} Dice %": _pct(v) for r, v in zip(summary["per_fold"],
                                                                            scores["dice"]["values"])})
            row.update({"Dice % mean ± SD": _pm(scores["dice"], 100), "HD95 mean ± SD": _pm(scores["hd95"])})
            if nsd and "nsd" in scores:  # the "mm" convention's
                row[nsd.replace("(%)", "% mean ± SD")] = _pm(scores["nsd"], 100)
            class_rows.append(row)
        lines += [markdown_table(class_rows), ""]
    if pooled is not None:
        lines += ["## nnU-Net's evaluation over all validation cases", "",
                  f"Every fold's validation predictions together, in the original geometry: `{POOLED_FILE}`.", "",
                  *summary_lines(pooled, names), ""]
    return lines


def _printed(summary: dict[str, Any], out: Path) -> list[str]:
    over = summary["over_folds"]
    lines = [f"{summary['folds']}-fold cross-validation of {summary['variant']} on {summary['data']}: trained folds "
             f"{summary['trained'] or 'none'}, reused {summary['skipped'] or 'none'}"]
    nsd = summary["nsd_title"]
    at = nsd.removeprefix("NSD ").removesuffix(" (%)") if nsd else ""  # "@ 1 mm"
    for r in summary["per_fold"]:
        lines.append(f"fold {r['fold']}: Dice {_pct(r['dice'])} %, HD95 {_two(r['hd95'])}"
                     + (f", NSD {_pct(r['nsd'])} % {at}" if nsd else "") + f" ({len(r['val'])} validation cases)")
    lines.append(f"over folds: Dice {_pm(over['dice'], 100)} %, HD95 {_pm(over['hd95'])} (papers' convention); "
                 f"Dice {_pm(over['dice_mm'], 100)} %, HD95 {_pm(over['hd95_mm'])} mm"
                 + (f"; NSD {_pm(over['nsd'], 100)} % {at}" if nsd else ""))
    lines.append(f"outputs in {out}/ (report.md, cv.json, splits_final.json, fold_k/)")
    return lines


def _nsd_words(title: str | None) -> str:
    """The report's words for the NSD column: its tolerance, or that the folds were scored before NSD."""
    if title is None:
        return "no NSD (the folds were scored before it was), "
    return f"{title.removesuffix(' (%)')} in % ({NSD_RULES}), "


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f}"


def _two(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _four(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def _pm(stats: dict[str, Any], scale: float = 1.0, digits: int = 2) -> str:
    if stats["mean"] is None:
        return "–"
    return f"{scale * stats['mean']:.{digits}f} ± {scale * stats['sd']:.{digits}f}"
