"""One small site for the site's tests: three variant pages (ViT with its conformance suite, the classic model on
translation and on lm), a lesson run at a tenth of its budget, and a comparison of two one-epoch image runs; and the
same inputs as a site in both languages (``site_both``: English at its root, Chinese under ``zh/``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tasks.cifar.task import CifarConfig, CifarTask
from tasks.compare.sweep import compare_runs
from tasks.lab.lesson import LabSettings, run_lesson
from tasks.runs.training import train
from tasks.site.build import build_site

VARIANTS = ["vit", "classic"]


def small_site(root: Path, out: Path) -> dict:
    return build_site(out, [root / "comparison"], root / "lab", VARIANTS, progress=False)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("site")
    run_lesson("params", LabSettings(out=root / "lab" / "params", quick=True, progress=False, scale=0.1))
    runs = []
    for seed, variant in ((0, "vit"), (0, "swin")):
        out = root / f"{variant}-{seed}"
        train(CifarTask, CifarConfig(variant=variant, preset="tiny", epochs=1, batch_size=100, out=str(out),
                                     seed=seed, progress=False, device="cpu", attention_images=0))
        runs.append(out)
    compare_runs("cifar", runs, root / "comparison")
    summary = small_site(root, root / "site")
    return SimpleNamespace(root=root, out=root / "site", summary=summary)


@pytest.fixture(scope="session")
def site_both(site) -> SimpleNamespace:
    """The small site's inputs built in both languages, without the conformance suite (the English site's tests
    run it; its table's words are checked apart)."""
    out = site.root / "site-both"
    summary = build_site(out, [site.root / "comparison"], site.root / "lab", VARIANTS, check=False, progress=False,
                         lang="both")
    return SimpleNamespace(root=site.root, out=out, zh=out / "zh", summary=summary)
