"""The conformance check, ``zoo check swiglu``: run ``pytest`` in this folder."""

from pathlib import Path

import pytest

from tasks.plugins import check_variant, load_user_dir, render


@pytest.mark.parametrize("preset", ["tiny"])  # add presets here; zoo check runs the default, --preset all every one
def test_swiglu_is_a_fair_patch(preset):
    load_user_dir(Path(__file__).parent)  # registers the variant, as --user-dir does (once)
    (report,) = check_variant("swiglu", "translation", [preset])
    assert not report.failed, "\n" + render(report)
