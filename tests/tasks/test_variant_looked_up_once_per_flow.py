"""A variant's name is looked up once per flow, then its :class:`zoo.registry.Variant` is passed down (issue 36):
``zoo diff``, ``zoo doctor --variant``, a site page and the probes' models each ask the registry for the name once.

Unlike ``tests/tasks/engine/test_variant_resolved_once.py`` (lookups from ``tasks/``), every lookup by name is counted
here wherever it is made, ``zoo.analysis`` included: the delta analysis and the probes take a name as their public entry
point, and a caller that already holds the registration hands it over instead.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

import tasks.doctor.runs
import tasks.site.variant
import zoo.analysis.delta
import zoo.analysis.probes
import zoo.registry
from tasks.cli.main import main
from zoo.analysis.catalogue import variant_rows

REGISTRY_FILE = zoo.registry.__file__


@pytest.fixture
def asked(monkeypatch) -> Counter:
    """Lookups by name (``get_variant`` / ``list_variants``, keyed by the name asked for) made outside the registry
    itself, counted from now on; the wrappers replace the functions wherever they were imported by name."""
    found: Counter = Counter()
    originals = {"get_variant": zoo.registry.get_variant, "list_variants": zoo.registry.list_variants}

    def counting(original):
        def lookup(*args, **kwargs):
            if sys._getframe(1).f_code.co_filename != REGISTRY_FILE:
                found[args[0] if args else kwargs.get("name", kwargs.get("task"))] += 1
            return original(*args, **kwargs)
        return lookup

    wrappers = {attr: counting(original) for attr, original in originals.items()}
    for module in [m for m in list(sys.modules.values()) if m is not None]:
        for attr, original in originals.items():
            if getattr(module, attr, None) is original:
                monkeypatch.setattr(module, attr, wrappers[attr])
    return found


def test_zoo_diff_looks_the_variant_up_once(asked, capsys):
    assert main(["diff", "pre-ln", "--preset", "tiny", "--format", "json"]) == 0
    assert asked["pre-ln"] == 1  # was 3: the command (for the default task), measure, build_pair
    assert '"variant": "pre-ln"' in capsys.readouterr().out


def test_zoo_diff_of_a_task_keeps_its_errors(capsys):
    assert main(["diff", "pre-ln", "--task", "cifr"]) == 2  # an unknown task: "did you mean", before the variant
    assert "unknown task 'cifr'. Did you mean 'cifar'?" in capsys.readouterr().err
    assert main(["diff", "pre-ln", "--task", "cifar"]) == 2
    assert "variant 'pre-ln' does not run on the cifar task" in capsys.readouterr().err
    assert main(["diff", "pre-lm"]) == 2
    assert "Did you mean 'pre-ln'?" in capsys.readouterr().err


def test_the_delta_analysis_takes_the_registration_a_caller_holds():
    from tasks.engine.registry import task_shape

    with pytest.raises(ValueError, match="runs on translation, not on the cifar task"):
        zoo.analysis.delta.registration_on(zoo.registry.get_variant("pre-ln", "translation"), task_shape("cifar"))


def test_the_doctor_reads_the_variant_from_its_task(asked, tmp_path, capsys):
    tasks.doctor.runs.doctor_variant("pre-ln", "translation", preset="tiny", batch_size=4, n_train=64)
    assert asked["pre-ln"] == 1  # was 2: the task's, and again for the default preset it shows
    asked.clear()
    assert main(["doctor", "--variant", "pre-ln", "--preset", "tiny", "--batch-size", "4", "--no-figures",
                 "--fail-on", "never", "--out", str(tmp_path / "doctor")]) == 0
    # one to find the variant's first task (--task not given), one by the task it builds; was 4 (the command's and
    # the doctor's default task, the task's, the default preset's)
    assert asked["pre-ln"] == 2
    assert "variant pre-ln (translation, preset tiny)" in capsys.readouterr().out


def test_a_site_page_looks_its_variant_up_once(asked, tmp_path):
    (row,) = [r for r in variant_rows("translation") if r["name"] == "pre-ln"]
    asked.clear()
    tasks.site.variant.variant_page(row, tasks.site.page.Roots({"en": tmp_path}), "pre-ln/index.html", check=False)
    assert asked["pre-ln"] == 1  # was 3: the page, measure, build_pair
    assert (Path(tmp_path) / "pre-ln" / "index.html").is_file()


def test_a_probe_model_looks_its_variant_up_once(asked):
    variant = zoo.registry.get_variant("pre-ln", "translation")
    asked.clear()
    model = zoo.analysis.probes.build_for_probes("pre-ln", "translation")
    assert asked["pre-ln"] == 1  # was 3: the model, its preset, its dropout overrides
    assert model.config == variant.config(zoo.analysis.probes.probe_preset(variant),
                                          **zoo.analysis.probes.quiet_overrides(variant))
    assert not model.training and zoo.analysis.probes.probe_preset(variant) == "tiny"
