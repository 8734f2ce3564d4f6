"""Plugins: the worked example loads through --user-dir, ZOO_USER_DIR and an installed entry point; a plugin
that fails to import, takes an existing name or declares an unknown part or task gets one line naming its file."""

from __future__ import annotations

import importlib
import os

import pytest

import zoo
from core.attention import KERNELS, ScaledDotProductAttention
from tasks.cli.main import main
from tasks.plugins.loader import ENTRY_POINT_GROUP, ENV_VAR, PluginError, load_plugins, load_user_dir, plugin_modules
from tests.plugin_helpers import EXAMPLE, isolated_registry, variant_source, write_plugin


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with isolated_registry():
        yield


def _params_line(capsys) -> str:
    return capsys.readouterr().out.splitlines()[0]


def test_the_example_loads_through_user_dir(capsys):
    with pytest.raises(ValueError, match="unknown variant 'swiglu'"):
        zoo.get_variant("swiglu")
    assert main(["params", "swiglu", "--preset", "tiny", "--user-dir", str(EXAMPLE)]) == 0
    assert _params_line(capsys) == "swiglu (tiny): 44,624 parameters"
    variant = zoo.get_variant("swiglu", "translation")
    assert variant.parts_changed == ("ffn",) and variant.paper.year == 2020
    model = zoo.create("swiglu", preset="tiny")
    assert type(model.encoder.layers[0].ffn).__name__ == "SwigluFFN"


def test_user_dir_before_the_command_and_the_package_folder_itself(capsys):
    # the folder holding the package, given before the subcommand; and the package folder itself
    assert main(["--user-dir", str(EXAMPLE), "params", "swiglu", "--preset", "tiny"]) == 0
    assert _params_line(capsys).startswith("swiglu (tiny)")
    assert load_user_dir(EXAMPLE / "swiglu")[0].variants == ()  # the same file: loaded once, nothing new
    assert plugin_modules(EXAMPLE) == (EXAMPLE, [("swiglu", EXAMPLE / "swiglu" / "__init__.py")])  # not test_*.py
    assert plugin_modules(EXAMPLE / "swiglu") == (EXAMPLE, [("swiglu", EXAMPLE / "swiglu" / "__init__.py")])


def test_the_example_loads_through_the_environment(monkeypatch, tmp_path, capsys):
    other = write_plugin(tmp_path / "more", {"dense2.py": variant_source(
        "dense2", 'Change("ffn", "a", "b", "c", revert={"ffn": "dense"})', '{"tiny": dict(PRESETS["tiny"], ffn="d2")}',
        'register_ffn("d2", lambda d, f, a, p, layer: PositionwiseFFN(d, f, a, p))')})
    monkeypatch.setenv(ENV_VAR, os.pathsep.join([str(EXAMPLE), "", str(other)]))
    assert main(["params", "swiglu", "--preset", "tiny"]) == 0
    assert _params_line(capsys).startswith("swiglu (tiny)")
    assert zoo.get_variant("dense2").presets["tiny"]["ffn"] == "d2"
    loaded = load_plugins([str(EXAMPLE)])  # the environment's and the flag's folder are the same: loaded once
    assert [item.source for item in loaded] == [f"{ENV_VAR} {EXAMPLE}", f"{ENV_VAR} {other}"]


def test_the_example_loads_through_an_installed_entry_point(tmp_path, monkeypatch, capsys):
    # A real (if minimal) installed distribution: a dist-info folder on sys.path declaring the entry point,
    # beside the package it names.
    site = tmp_path / "site"
    dist = write_plugin(site / "swiglu_zoo_plugin-0.1.0.dist-info", {
        "METADATA": "Metadata-Version: 2.1\nName: swiglu-zoo-plugin\nVersion: 0.1.0\n",
        "entry_points.txt": f"[{ENTRY_POINT_GROUP}]\nswiglu = swiglu\n",
    })
    assert dist.is_dir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(EXAMPLE))  # where the distribution's package lies
    points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    assert [(p.name, p.value, p.dist.name) for p in points] == [("swiglu", "swiglu", "swiglu-zoo-plugin")]
    assert main(["params", "swiglu", "--preset", "tiny"]) == 0  # no --user-dir, no environment
    assert _params_line(capsys).startswith("swiglu (tiny)")
    (loaded,) = load_plugins()
    assert loaded.source == "entry point swiglu = swiglu of swiglu-zoo-plugin 0.1.0" and loaded.variants == ()


def test_an_entry_point_that_fails_names_itself(tmp_path, monkeypatch):
    site = write_plugin(tmp_path / "site", {
        "broken_zoo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: broken-zoo\nVersion: 1.0\n",
        "broken_zoo-1.0.dist-info/entry_points.txt": f"[{ENTRY_POINT_GROUP}]\nbroken = broken_zoo_plugin\n",
        "broken_zoo_plugin.py": "import torch\n\nraise RuntimeError('no GPU here')\n",
    })
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(PluginError, match=r"plugin entry point broken = broken_zoo_plugin of broken-zoo 1.0 \(.*"
                                          r"broken_zoo_plugin.py:3\): failed to load \(RuntimeError: no GPU here\)"):
        load_plugins()


# ------------------------------------------------------------------------------------- refused plugins

HEADER_ONLY = "from core.attention import ReferenceAttention, register_kernel\n\n"


def _refused(folder, match: str) -> str:
    with pytest.raises(PluginError, match=match) as error:
        load_user_dir(folder)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_an_import_that_fails_names_the_file_and_line(tmp_path):
    folder = write_plugin(tmp_path / "p", {"boom.py": "import torch\n\nx = 1\nraise RuntimeError('bad\\nidea')\n"})
    _refused(folder, rf"plugin {folder / 'boom.py'}:4: failed to import \(RuntimeError: bad idea\)")
    folder = write_plugin(tmp_path / "s", {"typo.py": "x = 1\ndef f(:\n"})
    _refused(folder, rf"plugin {folder / 'typo.py'}:2: failed to import \(SyntaxError")
    # inside a package plugin: the submodule where it failed, not the package's __init__
    folder = write_plugin(tmp_path / "pkg", {"mine/__init__.py": "from .layers import X\n",
                                             "mine/layers.py": "import torch\nX = torch.nope\n"})
    _refused(folder, rf"plugin {folder / 'mine' / 'layers.py'}:2: failed to import \(AttributeError")


def test_an_existing_name_is_refused(tmp_path):
    # the same name for another task: the registry would accept it, a plugin may not take it
    folder = write_plugin(tmp_path / "a", {"again.py": variant_source(
        "classic", 'Change("ffn", "a", "b", "c", revert={"ffn": "dense"})', tasks='("cifar",)')})
    _refused(folder, rf"plugin {folder / 'again.py'}: registers variant 'classic', which already exists \(for "
                     r"translation, lm\); give the variant a new name")
    # the same task: the registry refuses it during the import
    folder = write_plugin(tmp_path / "b", {"again2.py": variant_source(
        "rope", 'Change("ffn", "a", "b", "c", revert={"ffn": "dense"})')})
    _refused(folder, rf"plugin {folder / 'again2.py'}:\d+: failed to import \(ValueError: variant 'rope' is already "
                     r"registered for \['translation'\]\)")
    # a kernel name of the core: refused, and the core's kernel is put back
    folder = write_plugin(tmp_path / "c", {"fast.py": HEADER_ONLY + "register_kernel('sdpa', ReferenceAttention)\n"})
    _refused(folder, r"plugin .*: registers the attention kernel 'sdpa', which already exists")
    assert KERNELS["sdpa"] is ScaledDotProductAttention


def test_an_unknown_part_or_task_is_refused(tmp_path):
    folder = write_plugin(tmp_path / "a", {"part.py": variant_source(
        "bad-part", 'Change("fnn", "a", "b", "c", revert={"ffn": "dense"})')})
    _refused(folder, rf"plugin {folder / 'part.py'}:\d+: failed to import \(ValueError: unknown part 'fnn'. "
                     r"Did you mean 'ffn'\?")
    folder = write_plugin(tmp_path / "b", {"task.py": variant_source(
        "bad-task", 'Change("ffn", "a", "b", "c", revert={"ffn": "dense"})', tasks='("translaton",)')})
    _refused(folder, rf"plugin {folder / 'task.py'}: variant 'bad-task' declares unknown task 'translaton'. "
                     r"Did you mean 'translation'\?")


def test_a_module_name_that_is_taken_is_refused(tmp_path):
    folder = write_plugin(tmp_path / "p", {"json.py": "x = 1\n"})
    _refused(folder, rf"plugin {folder / 'json.py'}: its module name 'json' is taken by the already imported .*"
                     "rename the plugin file or folder")


def test_missing_folders_and_the_command_line(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match=r"--user-dir .*nowhere: no such folder; give the folder holding"):
        load_user_dir(tmp_path / "nowhere")
    (tmp_path / "f.py").write_text("x = 1\n")
    with pytest.raises(NotADirectoryError, match="is a file"):
        load_user_dir(tmp_path / "f.py")
    folder = write_plugin(tmp_path / "p", {"boom.py": "raise ImportError('missing dependency: flash_attn')\n"})
    assert main(["check", "classic", "--user-dir", str(folder)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"zoo check: error: plugin {folder / 'boom.py'}:1: failed to import (ImportError: missing "
                     "dependency: flash_attn)"]
    assert main(["list", "--user-dir", str(tmp_path / "nowhere")]) == 2
    assert "zoo list: error: --user-dir" in capsys.readouterr().err
