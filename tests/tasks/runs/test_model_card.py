"""The model card of ``zoo export --format hf`` runs as printed, from any directory: its code names the export by
its absolute path, and ``zoo.create(name, pretrained=EXPORT)`` builds the registration of the task the export
records (``linear`` and ``moe`` are registered for translation first; a cifar export of them used to be built as
a translation model and fail)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

import zoo
from tasks.cifar.task import CifarConfig, CifarTask
from tasks.runs.export import export_run
from tasks.runs.training import train
from tests.tasks.cifar.test_cifar_use import write_fmnist

pytestmark = pytest.mark.slow  # trains and exports two runs, then runs the card's code in a subprocess


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_fmnist(tmp_path_factory.mktemp("card") / "fmnist", n_train=100, n_test=20)


def card_code(card: str) -> str:
    """The ```python block of the card's "Use" section, as printed."""
    found = re.search(r"## Use\n\n```python\n(.*?)```", card, re.S)
    assert found, card
    return found.group(1)


@pytest.mark.parametrize("variant", ["linear", "moe"])
def test_the_cards_code_runs_as_printed_from_another_directory(data, tmp_path, variant):
    torch.manual_seed(0)
    run_dir = tmp_path / "run"
    train(CifarTask, CifarConfig(variant=variant, preset="tiny", data=str(data), out=str(run_dir), epochs=1,
                                 batch_size=50, warmup=1, eval_batch_size=20, attention_images=0, progress=False,
                                 device="cpu", num_threads=1))
    export = export_run(run_dir, tmp_path / "hf", "hf")
    code = card_code((export / "README.md").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check = f"""
import torch
torch.set_num_threads(1)
model.eval()
assert model.config == run.variant_config, (model.config, run.variant_config)
c = model.config
x = torch.randn(2, c.in_channels, c.image_size, c.image_size, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    torch.save({{"x": x, "model": model(x), "run": run.model(x)}}, {str(tmp_path / "out.pt")!r})
"""
    done = subprocess.run([sys.executable, "-c", code + check], cwd=elsewhere, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f'pretrained="{export.resolve()}"' in code and "task=" not in code  # the export says its task
    out = torch.load(tmp_path / "out.pt")
    original = zoo.load_run(run_dir)
    assert original.variant_config == zoo.load_run(export).variant_config and original.task.name == "cifar"
    with torch.no_grad():
        expected = original.model.eval()(out["x"])
    torch.testing.assert_close(out["model"], expected)  # float32, the same weights: default tolerances
    torch.testing.assert_close(out["run"], expected)
