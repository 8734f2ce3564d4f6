"""The ``zoo`` command line: every flag has help, bad input gets one line (exit status 2) before any data loads,
and ``zoo params`` works for every variant."""

from __future__ import annotations

import argparse

import pytest

from tasks.cli.main import build_parser, main


def _parsers(parser: argparse.ArgumentParser, prog: str = "zoo"):
    """(prog, parser, action) for every argument of every (sub)command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prog} {name}", parser, argparse.Action([name], name, help=helps.get(name))
                yield from _parsers(sub, f"{prog} {name}")
        else:
            yield prog, parser, action


def test_every_flag_of_every_command_has_help():
    missing = [f"{prog}: {'/'.join(action.option_strings) or action.dest}"
               for prog, _, action in _parsers(build_parser()) if not (action.help or "").strip()]
    assert not missing, "flags without help: " + ", ".join(missing)


def test_train_help_shows_the_field_comments(capsys):
    assert main(["train", "translation", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "--max-len MAX_LEN training pairs with a side this long (tokens) or longer are left out" in out
    assert "--epochs EPOCHS passes over the training data (default: 8)" in out


def test_top_level_help(capsys):
    assert main(["--help"]) == 0
    assert "train" in capsys.readouterr().out


@pytest.mark.parametrize("variant", ["vit", "swin", "missformer", "classic"])
def test_params_uses_the_variants_own_default_preset(variant, capsys):
    import zoo

    assert main(["params", variant]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{variant} ({zoo.get_variant(variant).default_preset}): ") and "attention" in out


def test_params_with_an_explicit_preset(capsys):
    assert main(["params", "classic", "--preset", "base"]) == 0
    assert "classic (base): 63,082,496 parameters" in capsys.readouterr().out


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file.txt"
    path.write_text("not a folder\n")
    return path


# (arguments, what the one line must contain); {file} is a plain file, {tmp} an empty folder
BAD_INPUTS = [
    (["train", "translation", "--max-len", "0"], "max_len must be >= 2"),
    (["train", "translation", "--max-len", "3", "--n-train", "200"], "max_len=3 keeps none of the 200 training pairs"),
    (["train", "translation", "--lr", "nan"], "lr must be a finite number, got nan"),
    (["train", "translation", "--lr", "0"], "lr must be > 0, got 0.0"),
    (["train", "translation", "--label-smoothing", "1"], "label_smoothing must be in [0, 1), got 1.0"),
    (["train", "translation", "--beam-size", "0"], "beam_size must be > 0, got 0"),
    (["train", "translation", "--temperature", "inf"], "temperature must be a finite number, got inf"),
    (["train", "translation", "--length-penalty", "nan"], "length_penalty must be a finite number, got nan"),
    (["train", "translation", "--vocab-size", "3"], "vocab_size must be > 4"),
    (["train", "translation", "--eval-size", "0"], "eval_size must be > 0, got 0"),
    (["train", "translation", "--weight-decay", "0.1"], "weight_decay must be in [0, 0]"),
    (["train", "translation", "--grad-clip", "-1"], "grad_clip must be >= 0 (0 disables clipping), got -1.0"),
    (["train", "translation", "--seed", "-1"], "seed must be in [0, 4294967295]"),
    (["train", "translation", "--epochs", "0"], "epochs must be > 0, got 0"),
    (["train", "translation", "--difficulty", "hardd"], "Did you mean 'hard'?"),
    (["train", "translation", "--out", "{file}"], "--out {file} is a file; pass a new folder"),
    (["train", "translation", "--out", "{file}/run"], "--out {file}/run is not a folder ({file} is a file)"),
    (["train", "translation", "--data", "{file}"], "--data {file} is a file; pass the folder that holds the dataset"),
    (["train", "medseg", "--data", "{file}"], "--data {file} is a file"),
    (["train", "cifar", "--data", "{file}"], "--data {file} is a file"),
    (["train", "translation", "--device", "tpu9"], "unknown device 'tpu9'; use auto, cpu, cuda or cuda:N"),
    (["train", "translation", "--batch-size", "abc"], "argument --batch-size: invalid int value: 'abc'"),
    (["train", "translation", "--nope", "1"], "unrecognized arguments: --nope 1"),
    (["train", "cifar", "--valid-fraction", "0.5"], "valid_fraction must be in [0, 0.5)"),
    (["train", "cifar", "--crop-padding", "40"], "crop_padding must be in [0, 16]"),
    (["train", "cifar", "--label-smoothing", "nan"], "label_smoothing must be in [0, 1), got nan"),
    (["train", "medseg", "--image-size", "100"], "image_size must be divisible by 32"),
    (["train", "medseg", "--zoom", "1.5"], "zoom must be < 1"),
    (["train", "medseg", "--poly-power", "inf"], "poly_power must be a finite number, got inf"),
    (["train", "medseg", "--flip-prob", "2"], "flip_prob must be in [0, 1], got 2.0"),
    (["train", "medseg", "--rotate-degrees", "-5"], "rotate_degrees must be in [0, 180], got -5.0"),
    (["compare", "translation", "--seeds", "0", "--variants", "classic"], "seeds must be > 0, got 0"),
    (["compare", "translation", "--variants", "classic", "--out", "{file}"], "--out {file} is a file"),
    (["compare", "translation", "--variants", "classic", "--set", "lr=-1"], "lr must be > 0, got -1"),
    (["compare", "translation", "--variants", "clasic"], "Did you mean 'classic'?"),
    (["ablate", "linear", "--task", "translation", "--epochs", "0"], "epochs must be > 0, got 0"),
    (["params", "vit", "--preset", "base"], "unknown preset of variant 'vit' 'base'"),
    (["lab", "scale", "--threads", "0"], "--threads must be >= 1, got 0"),
]


@pytest.mark.parametrize("argv, expected", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_gets_one_line(argv, expected, a_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written; if it were, it lands here
    argv = [a.format(file=a_file) for a in argv]
    if "--out" not in argv and argv[0] in ("train", "compare", "ablate"):
        argv += ["--out", str(tmp_path / "run")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("zoo") and ": error: " in lines[0]  # unknown flags are the top parser's: "zoo: "
    assert expected.format(file=a_file) in lines[0]
    assert not (tmp_path / "run").exists()
