"""Every numeric (and boolean) field of every task config is validated when the config is built, and the flag
help comes from the fields' trailing comments."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from plumbing.errors import check_int, check_number
from tasks.cifar.task import CifarConfig
from tasks.engine.config import TrainConfig, field_help
from tasks.medseg.task import MedsegConfig
from tasks.translation.task import TranslationConfig

CONFIGS = (TrainConfig, TranslationConfig, CifarConfig, MedsegConfig)


def _fields_of(kind: type) -> list[tuple[type, str]]:
    return [(cls, f.name) for cls in CONFIGS for f in dataclasses.fields(cls)
            if typing.get_type_hints(cls)[f.name] is kind]


@pytest.mark.parametrize("cls, name", _fields_of(int) + _fields_of(float), ids=lambda x: getattr(x, "__name__", x))
def test_every_numeric_field_refuses_a_string(cls, name):
    with pytest.raises(TypeError, match=rf"^{name} must be an? (int|number|float).*, got str 'x'"):
        cls(**{name: "x"})


@pytest.mark.parametrize("cls, name", _fields_of(int), ids=lambda x: getattr(x, "__name__", x))
def test_every_int_field_refuses_a_float(cls, name):
    with pytest.raises(TypeError, match=rf"^{name} must be an int, got float 1.5"):
        cls(**{name: 1.5})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("cls, name", _fields_of(float), ids=lambda x: getattr(x, "__name__", x))
def test_every_float_field_refuses_nan_and_infinities(cls, name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be (a finite number|in \[0, 1\)), got {value}"):
        cls(**{name: value})


@pytest.mark.parametrize("cls, name", _fields_of(bool), ids=lambda x: getattr(x, "__name__", x))
def test_every_bool_field_refuses_a_string(cls, name):
    with pytest.raises(TypeError, match=rf"^{name} must be a bool"):
        cls(**{name: "false"})


@pytest.mark.parametrize("cls, overrides, message", [
    (TrainConfig, {"epochs": 0}, "epochs must be > 0, got 0"),
    (TrainConfig, {"warmup": -1}, "warmup must be >= 0, got -1"),
    (TrainConfig, {"lr": 0.0}, "lr must be > 0, got 0.0"),
    (TrainConfig, {"lr": -1e-3}, "lr must be > 0, got -0.001"),
    (TrainConfig, {"grad_clip": -1.0}, r"grad_clip must be >= 0 \(0 disables clipping\), got -1.0"),
    (TrainConfig, {"weight_decay": -0.1}, "weight_decay must be >= 0, got -0.1"),
    (TrainConfig, {"seed": -1}, r"seed must be in \[0, 4294967295\]"),
    (TrainConfig, {"seed": 2**32}, r"seed must be in \[0, 4294967295\]"),
    (TrainConfig, {"balance_weight": -1.0}, "balance_weight must be >= 0"),
    (TranslationConfig, {"max_len": 1}, r"max_len must be >= 2 \(pairs are kept when both sides are shorter.*got 1"),
    (TranslationConfig, {"vocab_size": 4}, r"vocab_size must be > 4 \(room for the 4 special tokens"),
    (TranslationConfig, {"label_smoothing": 1.0}, r"label_smoothing must be in \[0, 1\), got 1.0"),
    (TranslationConfig, {"beam_size": 0}, "beam_size must be > 0, got 0"),
    (TranslationConfig, {"eval_size": 0}, "eval_size must be > 0, got 0"),
    (TranslationConfig, {"temperature": -0.5}, r"temperature must be >= 0 \(0: no sampling\), got -0.5"),
    (TranslationConfig, {"n_train": -5}, "n_train must be >= 0, got -5"),
    (TranslationConfig, {"weight_decay": 0.01}, r"weight_decay must be in \[0, 0\] \(translation trains with"),
    (TranslationConfig, {"difficulty": "hardd"}, "Did you mean 'hard'"),
    (TranslationConfig, {"tokenizer": "bpee"}, "Did you mean 'bpe'"),
    (CifarConfig, {"valid_fraction": 0.5}, r"valid_fraction must be in \[0, 0.5\) \(0 validates on the test split\)"),
    (CifarConfig, {"valid_fraction": -0.1}, r"valid_fraction must be in \[0, 0.5\)"),
    (CifarConfig, {"crop_padding": 17}, r"crop_padding must be in \[0, 16\] \(half the image size"),
    (CifarConfig, {"eval_batch_size": 0}, "eval_batch_size must be > 0"),
    (CifarConfig, {"attention_images": -1}, "attention_images must be >= 0"),
    (CifarConfig, {"weight_decay": -1.0}, "weight_decay must be >= 0"),
    (MedsegConfig, {"image_size": 100}, "image_size must be divisible by 32.*try 96"),
    (MedsegConfig, {"image_size": 0}, "image_size must be > 0"),
    (MedsegConfig, {"rotate_degrees": 200.0}, r"rotate_degrees must be in \[0, 180\], got 200.0"),
    (MedsegConfig, {"zoom": -0.1}, "zoom must be >= 0"),
    (MedsegConfig, {"zoom": 1.0}, "zoom must be < 1"),
    (MedsegConfig, {"intensity": 1.0}, r"intensity must be in \[0, 1\) \(a scale by 1 ± intensity"),
    (MedsegConfig, {"flip_prob": 1.5}, r"flip_prob must be in \[0, 1\], got 1.5"),
    (MedsegConfig, {"poly_power": -1.0}, "poly_power must be >= 0"),
    (MedsegConfig, {"ce_weight": -0.4}, "ce_weight must be >= 0"),
    (MedsegConfig, {"valid_cases": -1}, "valid_cases must be >= 0"),
    (MedsegConfig, {"overlay_slices": -1}, "overlay_slices must be >= 0"),
])
def test_out_of_range_values_are_refused_with_the_range(cls, overrides, message):
    with pytest.raises(ValueError, match=message):
        cls(**overrides)


def test_edge_values_inside_the_ranges_are_accepted():
    TranslationConfig(max_len=2, vocab_size=5, label_smoothing=0.0, temperature=0.0, length_penalty=-1.0, beam_size=1)
    CifarConfig(valid_fraction=0.0, crop_padding=16, attention_images=0, lr=1, weight_decay=0)
    MedsegConfig(rotate_degrees=180.0, flip_prob=1.0, zoom=0.0, intensity=0.0, dice_weight=0.0, seed=2**32 - 1)
    TrainConfig(grad_clip=0.0, warmup=0, num_threads=0, balance_weight=0.0, z_weight=0.0)


def test_the_range_helpers():
    check_int("n", 3, 2, 3)
    check_number("x", 0.5, 0, 1, low_open=True, high_open=True)
    with pytest.raises(ValueError, match=r"^x must be in \(0, 1\), got 1$"):
        check_number("x", 1, 0, 1, low_open=True, high_open=True)
    with pytest.raises(ValueError, match=r"^n must be <= 3 \(why\), got 4$"):
        check_int("n", 4, high=3, hint="why")
    with pytest.raises(TypeError, match="^x must be a number, got bool True$"):
        check_number("x", True)


def test_help_is_each_fields_trailing_comment_from_the_nearest_class():
    base, translation, cifar = field_help(TrainConfig), field_help(TranslationConfig), field_help(CifarConfig)
    assert translation["epochs"] == base["epochs"] == "passes over the training data"  # inherited
    assert cifar["warmup"].startswith("optimizer steps; ~1 epoch") and base["warmup"] != cifar["warmup"]  # overridden
    assert "flip_prob" in field_help(MedsegConfig) and "Off by default" not in field_help(MedsegConfig)["flip_prob"]
    for cls in CONFIGS:  # every field has a help text
        assert set(field_help(cls)) == {f.name for f in dataclasses.fields(cls)}, cls
