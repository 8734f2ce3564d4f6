"""The ``--variant`` name is looked up in the registry once where a run (or a sweep) starts, and the
:class:`zoo.registry.Variant` is passed down: :attr:`tasks.engine.task.Task.variant`.

Every lookup by name (``zoo.registry.get_variant`` / ``list_variants``) that code under ``tasks/`` makes is counted
during a tiny ``zoo train``, the loading of its run folder, and a tiny two-variant ``zoo compare``. The zoo's own
analyses (``zoo.analysis``, which take a name as their public entry point) are not counted.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

import zoo.registry
from tasks.cli.main import main
from tasks.compare.sweep import compare
from tasks.engine.task import Task
from tasks.runs.export import model_card
from tasks.runs.run import load_run
from tasks.translation.task import TranslationConfig, TranslationTask

TINY = {"preset": "tiny", "n_train": 64, "eval_size": 4, "beam_size": 1, "num_threads": 1, "progress": False,
        "epochs": 1}
TASKS_DIR = str(Path(__file__).resolve().parents[3] / "tasks")


@pytest.fixture
def lookups(monkeypatch) -> tuple[Counter, Counter]:
    """(lookups by name made from ``tasks/``, Task objects built per variant), counted from now on. The counting
    wrappers replace the registry's functions in zoo.registry and in every module that imported them by name."""
    asked, built = Counter(), Counter()
    originals = {"get_variant": zoo.registry.get_variant, "list_variants": zoo.registry.list_variants}

    def counting(original):
        def lookup(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(TASKS_DIR):
                asked[args[0] if args else kwargs.get("name", kwargs.get("task"))] += 1
            return original(*args, **kwargs)
        return lookup

    wrappers = {attr: counting(original) for attr, original in originals.items()}
    for module in [m for m in list(sys.modules.values()) if m is not None]:
        for attr, original in originals.items():
            if getattr(module, attr, None) is original:
                monkeypatch.setattr(module, attr, wrappers[attr])
    init = Task.__init__

    def counted_init(self, config, *args, **kwargs):
        built[config.variant] += 1
        init(self, config, *args, **kwargs)

    monkeypatch.setattr(Task, "__init__", counted_init)
    return asked, built


def test_a_run_looks_its_variant_up_once_and_loading_it_once_more(tmp_path, lookups):
    asked, built = lookups
    out = tmp_path / "run"
    flags = [f"--{k.replace('_', '-')}={str(v).lower()}" for k, v in TINY.items()]
    assert main(["train", "translation", "--variant", "pre-ln", "--out", str(out), *flags]) == 0
    assert (dict(asked), dict(built)) == ({"pre-ln": 1}, {"pre-ln": 1})
    asked.clear(), built.clear()
    run = load_run(out)  # rebuilding the model from run.json: one Task, one lookup
    assert (dict(asked), dict(built)) == ({"pre-ln": 1}, {"pre-ln": 1})
    assert run.task.variant is zoo.registry.get_variant("pre-ln", "translation")
    asked.clear()
    card = model_card(run, tmp_path / "export", [])  # zoo export's README: the changes of the run's own Variant
    assert not asked and "## What changed against the classic Transformer" in card and "| norm | Post-LN" in card


def test_a_comparison_resolves_each_variant_once_at_its_start_and_once_per_task(tmp_path, lookups):
    asked, built = lookups
    compare("translation", ["classic", "pre-ln"], tmp_path / "c", seeds=1, **TINY)
    # per variant: the sweep's check before training, the training run's task, the task of the run loaded for the
    # table (parameters, FLOPs, parts changed, undeclared differences all read that one registration)
    assert dict(built) == {"classic": 2, "pre-ln": 2}
    assert dict(asked) == {"classic": 3, "pre-ln": 3}


def test_unknown_and_foreign_variant_names_keep_their_clear_errors():
    with pytest.raises(ValueError, match=r"unknown variant 'clasic'\. Did you mean 'classic'\?"):
        TranslationTask.resolve_variant("clasic")
    with pytest.raises(ValueError, match="does not run on the translation task"):
        TranslationTask.resolve_variant("vit")
    with pytest.raises(TypeError, match="variant name must be a str"):
        TranslationTask.resolve_variant(3)


def test_a_run_folder_whose_variant_disagrees_with_its_config_is_refused():
    import torch

    from tasks.engine.distributed import DistInfo

    task = TranslationTask(TranslationConfig(variant="pre-ln"), torch.device("cpu"), DistInfo())
    with pytest.raises(ValueError, match="run.json names the variant 'classic' but its config says 'pre-ln'"):
        task.build_saved_model("classic", {})



def test_an_entry_without_its_registration_is_still_checked_for_undeclared_differences(monkeypatch):
    import tasks.compare.sweep as sweep

    seen = []
    monkeypatch.setattr(sweep, "counterpart_of", lambda task_name, registration, *rest: seen.append(registration))
    sweep.refuse_undeclared("translation", [sweep.Entry("pre-ln", "pre-ln")], "tiny", {})
    assert seen == [zoo.registry.get_variant("pre-ln", "translation")]  # not None, which would skip the check
