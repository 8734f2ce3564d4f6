"""``zoo check``: every built-in variant passes the conformance suite, and deliberately broken plugins fail it on
the right row (a kernel that ignores the causal mask, an undeclared change, a config field where the variant differs
from its classic counterpart with no change declared: a choice, a size, a value inside an option dict; a parameter
without gradient, a revert that leaves the variant's module in place, reaches an undeclared part or reverts nothing, a
state dict that does not round-trip).

The built-in variants' conformance is this one parametrised call: a new variant (or a new task of one) is
checked without editing this file, at its smallest preset to stay fast.
"""

from __future__ import annotations

import json

import pytest

import zoo
from tasks.cli.main import main
from tasks.plugins.check import check_variant, render
from tasks.plugins.check_decoding import is_decoder_only
from tasks.plugins.loader import load_user_dir
from tests.plugin_helpers import UNDECLARED, ffn_extra, isolated_registry, variant_source, write_plugin
from zoo.analysis import probes

REGISTRATIONS = [(name, task) for name in zoo.list_variants() for task in dict.fromkeys(zoo.tasks_of(name))]


@pytest.mark.slow
@pytest.mark.parametrize("name, task", REGISTRATIONS, ids=[f"{n}-{t}" for n, t in REGISTRATIONS])
def test_every_builtin_variant_is_a_fair_patch(name, task):
    variant = zoo.get_variant(name, task)
    preset = probes.probe_preset(variant)
    (report,) = check_variant(name, task, [preset])
    assert not report.failed, "\n" + render(report)
    measurable = not variant.changes or any(c.revertible for c in variant.changes)
    expected = {"build", "forward", "backward", "batch (eval)", "save/load", "seed", "accounting",
                *(["changes"] if measurable else []), *(f"revert {c.name}" for c in variant.changes if c.revertible)}
    model = variant.build(variant.config(preset))
    if probes.is_autoregressive(model):
        expected |= {"causal (train)", "causal (eval)", "padding", "kv cache"}
    elif is_decoder_only(model):  # a language model: every position real, no padding row
        expected |= {"causal (train)", "causal (eval)", "kv cache"}
    assert {r.check for r in report.rows if r.ok is not None} == expected
    if not measurable:  # MONAI's networks: their counterpart is the variant itself, so nothing was measured
        assert report.row("changes").measured.startswith("not measurable: no change can be reverted (")
    n_a = len(report.rows) - len(expected)  # counted apart in the summary, never as passed
    assert f"{len(expected)}/{len(expected)} checks passed{f', {n_a} n/a' if n_a else ''} over" in render(report)


# ------------------------------------------------------------------------- broken plugins fail the right row

FFN_PRESETS = '{n: dict(v, ffn="mine") for n, v in PRESETS.items()}'
FFN_CHANGE = 'Change("ffn", "dense", "mine", "a flaw", revert={"ffn": "dense"})'

BROKEN = {
    "peeking": dict(  # attends to later positions: is_causal dropped
        presets='{n: dict(v, kernel="peeking") for n, v in PRESETS.items()}',
        change='Change("attention", "softmax", "peeking", "a flaw", revert={"kernel": "sdpa"})',
        extra='''
        class PeekingAttention(ReferenceAttention):
            def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
                return super().forward(q, k, v, mask, bias, False, need_weights)

        register_kernel("peeking", PeekingAttention)
        '''),
    "undeclared": dict(  # declares the FFN, but its presets also swap every attention kernel
        presets='{n: dict(v, ffn="mine", kernel="reference") for n, v in PRESETS.items()}', change=FFN_CHANGE,
        extra='''
        class MineFFN(PositionwiseFFN):
            pass

        register_ffn("mine", lambda d, f, a, p, layer: MineFFN(d, f, a, p))
        '''),
    "swapped": dict(  # declares the FFN, but its builder also swaps every attention kernel
        presets=FFN_PRESETS, change=FFN_CHANGE, build="swapping",
        extra='''
        class SwappedFFN(PositionwiseFFN):
            pass

        register_ffn("mine", lambda d, f, a, p, layer: SwappedFFN(d, f, a, p))


        def swapping(config):
            model = Transformer(config)
            for module in list(model.modules()):
                for name, child in module.named_children():
                    if type(child).__name__ == "ScaledDotProductAttention":
                        setattr(module, name, ReferenceAttention())
            return model
        '''),
    "idle": dict(  # a parameter the forward never uses
        presets=FFN_PRESETS, change=FFN_CHANGE,
        extra='''
        class IdleFFN(PositionwiseFFN):
            def __init__(self, *args):
                super().__init__(*args)
                self.unused = nn.Linear(4, 4)

        register_ffn("mine", lambda d, f, a, p, layer: IdleFFN(d, f, a, p))
        '''),
    "stuck": dict(  # the revert names a field that does not pick the FFN
        presets=FFN_PRESETS, change='Change("ffn", "dense", "mine", "a flaw", revert={"activation": "relu"})',
        extra='''
        class StuckFFN(PositionwiseFFN):
            pass

        register_ffn("mine", lambda d, f, a, p, layer: StuckFFN(d, f, a, p))
        '''),
    "reaching": dict(  # the revert also switches the norm placement
        presets=FFN_PRESETS,
        change='Change("ffn", "dense", "mine", "a flaw", revert={"ffn": "dense", "norm_first": True})',
        extra='''
        class ReachingFFN(PositionwiseFFN):
            pass

        register_ffn("mine", lambda d, f, a, p, layer: ReachingFFN(d, f, a, p))
        '''),
    "idle-loss": dict(  # a loss change whose revert sets what the variant already has
        presets="PRESETS", change='Change("objective", "cross-entropy", "mine", "a flaw", revert={"init": "xavier"})'),
    "forgetful": dict(  # a random scale kept outside the state dict
        presets=FFN_PRESETS, change=FFN_CHANGE,
        extra='''
        class ForgetfulFFN(PositionwiseFFN):
            def __init__(self, *args):
                super().__init__(*args)
                self.register_buffer("scale", torch.rand(self.fc2.out_features) + 0.5, persistent=False)

            def forward(self, x):
                return super().forward(x) * self.scale

        register_ffn("mine", lambda d, f, a, p, layer: ForgetfulFFN(d, f, a, p))
        '''),
    "late-peeking": dict(  # keeps the causal mask for the first 20 queries only (a "long-sequence fast path" bug)
        presets='{n: dict(v, kernel="late-peeking") for n, v in PRESETS.items()}',
        change='Change("attention", "softmax", "late-peeking", "a flaw", revert={"kernel": "sdpa"})',
        extra='''
        class LatePeekingAttention(ReferenceAttention):
            def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
                if is_causal:
                    nq, nk = q.shape[-2], k.shape[-2]
                    allowed = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq)
                    allowed[20:] = True  # past 20 queries every key is visible
                    mask = allowed if mask is None else mask & allowed
                return super().forward(q, k, v, mask, bias, False, need_weights)

        register_kernel("late-peeking", LatePeekingAttention)
        '''),
    "chunk-leak": dict(  # a chunked kernel whose last query of each 16-token chunk sees the next chunk's first key
        presets='{n: dict(v, kernel="chunk-leak") for n, v in PRESETS.items()}',
        change='Change("attention", "softmax", "chunk-leak", "a flaw", revert={"kernel": "sdpa"})',
        extra='''
        class ChunkLeakAttention(ReferenceAttention):
            chunk_size = 16  # zoo.analysis.probes reads it: probe past the chunk boundary

            def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
                if is_causal:
                    nq, nk = q.shape[-2], k.shape[-2]
                    allowed = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq)
                    last = torch.arange(nk - nq, nk)  # each query's own position
                    edge = (last + 1) % self.chunk_size == 0
                    allowed[edge.nonzero().flatten(), (last[edge] + 1).clamp(max=nk - 1)] = True
                    mask = allowed if mask is None else mask & allowed
                return super().forward(q, k, v, mask, bias, False, need_weights)

        register_kernel("chunk-leak", ChunkLeakAttention)
        '''),
    **UNDECLARED,  # declares the FFN, but its presets set one head and a third decoder layer / another chunk size
}

# broken plugin -> {row: the start of its reason}; every other applicable row must pass
FAILS = {
    "peeking": {"causal (train)": "earlier outputs move when later target tokens change",
                "causal (eval)": "earlier outputs move", "kv cache": "cached decoding differs from recomputation"},
    "late-peeking": {"causal (train)": "earlier outputs move when later target tokens change: by",
                     "causal (eval)": "earlier outputs move", "kv cache": "cached decoding differs"},
    "chunk-leak": {"causal (train)": "earlier outputs move when later target tokens change: by",
                   "causal (eval)": "earlier outputs move", "kv cache": "cached decoding differs"},
    "undeclared": {"changes": "`kernel` 'sdpa' → 'reference': no declared change reverts it; declare it or use the "
                              "classic value; undeclared change at attention: ScaledDotProductAttention×6 → "
                              "Dropout×6, ReferenceAttention×6"},
    "swapped": {"changes": "undeclared change at attention: ScaledDotProductAttention×6 → Dropout×6, "
                           "ReferenceAttention×6, made by the builder swapping"},
    "idle": {"backward": "no gradient reaches 8 parameter(s): encoder.layers.0.ffn.unused.weight"},
    "stuck": {"revert ffn": "{'activation': 'relu'} leaves the variant's modules at ffn in place (Dropout×4, Linear×8, "
                            "ReLU×4, StuckFFN×4)",
              "changes": "`ffn` 'dense' → 'stuck': no declared change reverts it; declare it or use the classic "
                         "value"},
    "reaching": {"revert ffn": "{'ffn': 'dense', 'norm_first': True} also changes norm: nothing → LayerNorm×2",
                 "changes": "undeclared change at norm"},
    "idle-loss": {"revert objective": "{'init': 'xavier'} already holds in the variant's config: it reverts nothing"},
    "forgetful": {"save/load": "outputs after a safetensors and a state dict round trip differ"},
    "wide": {"changes": "`heads` 4 → 1: no declared change reverts it; declare it or use the classic value; "
                        "`decoder_layers` 2 → 3: no declared change reverts it; declare it or use the classic value; "
                        "undeclared change at attention: nothing → Linear×4, MultiHeadAttention×2, "
                        "ScaledDotProductAttention×2"},
    "chunky": {"changes": "`kernel_options.chunk_size` (absent) → 16: no declared change reverts it; declare it or "
                          "use the linear value"},
}


@pytest.fixture
def broken(tmp_path):
    # each plugin registers its FFN under its own name: two plugins may not register one name
    sources = {f"{name.replace('-', '_')}_plugin.py": variant_source(name, **{k: v.replace('"mine"', f'"{name}"')
                                                            for k, v in spec.items()})
               for name, spec in BROKEN.items()}
    with isolated_registry():
        for file, source in sources.items():
            folder = write_plugin(tmp_path / file.removesuffix(".py"), {file: source})
            load_user_dir(folder)
        yield


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_plugin_fails_the_right_row(name, broken):
    (report,) = check_variant(name, "translation", ["tiny"])
    failed = {r.check: r.reason for r in report.failed}
    assert set(failed) == set(FAILS[name]), "\n" + render(report)
    for check, reason in FAILS[name].items():
        assert failed[check].startswith(reason), failed[check]
    assert report.row("build").ok and report.row("forward").ok


@pytest.mark.slow
def test_the_command_prints_one_table_and_sets_the_exit_status(broken, capsys):
    assert main(["check", "idle", "--preset", "tiny", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "tiny    backward        FAIL" in out and "idle on translation: 12/13 checks passed" in out
    assert out.rstrip().endswith("FAIL (tiny/backward)")
    assert main(["check", "pre-ln", "--preset", "tiny", "--format", "json", "--quiet"]) == 0
    reports = json.loads(capsys.readouterr().out)  # pre-ln is registered for translation and the language model
    assert [(r["variant"], r["task"]) for r in reports] == [("pre-ln", "translation"), ("pre-ln", "lm")]
    assert all({r["result"] for r in report["rows"]} == {"PASS"} for report in reports)
    assert reports[0]["rows"][0]["measured"] == "44,928 parameters"


def test_presets_of_a_name_registered_for_two_tasks(caplog):
    # moe's translation registration has "mini", its cifar registration "cpu"; each is checked at its own
    caplog.set_level("INFO", logger="tasks.plugins.check")
    reports = check_variant("moe", presets=["cpu"])
    assert [(r.task, {row.preset for row in r.rows}) for r in reports] == [("cifar", {"cpu"})]
    assert not reports[0].failed, "\n" + render(reports[0])
    assert "moe on translation has none of the presets cpu (it has tiny, mini, small, base, big)" in caplog.text


@pytest.mark.parametrize("argv, expected", [
    (["check", "pre-lnn"], "unknown variant 'pre-lnn'. Did you mean 'pre-ln'?"),
    (["check", "pre-ln", "--preset", "tiyn"], "unknown preset of variant 'pre-ln' 'tiyn'. Did you mean 'tiny'?"),
    (["check", "moe", "--preset", "tiny,vit-smal"], "unknown preset of variant 'moe' 'vit-smal'"),
    (["check", "vit", "--task", "translation"], "variant 'vit' does not run on the translation task"),
])
def test_bad_arguments_get_one_line(argv, expected, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zoo check: error: ") and expected in err[0]


QUICK = dict(  # two small presets, the first the default: a whole `zoo check` in seconds
    presets='{"tiny": dict(PRESETS["tiny"], ffn="quick"), "wee": dict(PRESETS["tiny"], ffn="quick", d_ff=32)}',
    change='Change("ffn", "dense", "quick", "a flaw", revert={"ffn": "dense"})', extra=ffn_extra("QuickFFN", "quick"),
    registration='default_preset="wee"')


@pytest.mark.slow
def test_by_default_the_preset_zoo_train_trains_is_checked_and_the_others_are_named(tmp_path, capsys):
    folder = write_plugin(tmp_path / "quick", {"quick_plugin.py": variant_source("quick", **QUICK)})
    with isolated_registry():
        assert main(["check", "quick", "--quiet", "--user-dir", str(folder)]) == 0
        out = capsys.readouterr().out
        assert "quick on translation: 13/13 checks passed over 1 preset(s)" in out
        assert {line.split()[0] for line in out.splitlines()[2:-2]} == {"wee"}  # the table's rows
        assert out.rstrip().splitlines()[-2] == (
            "not checked: tiny (44,800 parameters); the larger take minutes each on a CPU. Every preset: "
            f"zoo check quick --task translation --preset all --user-dir {folder}")
        (report,) = check_variant("quick", presets=["all"])
    assert [r.preset for r in report.rows if r.check == "build"] == ["tiny", "wee"] and report.unchecked == {}
    assert "not checked" not in render(report)
