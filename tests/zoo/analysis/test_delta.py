"""The delta analysis: declared changes match the built models, formulas, JSON schema, errors, README."""

import json
import re
from pathlib import Path

import pytest

import zoo
from core.model import build_transformer
from core.parts import PARTS, PROCEDURES
from tasks.cli.main import main
from tasks.engine.registry import task_shape
from zoo.analysis.catalogue import variant_rows, variants_markdown
from zoo.analysis.delta import flops_by_part, measure, module_flops
from zoo.analysis.report import render_markdown


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.list_variants())
def test_declared_changes_are_exactly_the_measured_ones(name):
    for task in zoo.tasks_of(name):
        variant = zoo.get_variant(name, task)
        report = measure(name, task_shape(task), memory=False)
        measured = {p["part"] for p in report["parts"] if p["measured_change"]}
        procedures = {p["part"] for p in report["parts"] if p["procedure_only"]}  # e.g. DeiT's objective
        # a change MONAI's network has no switch for (no_revert) is declared but never applied, so never measured
        unreverted = {p for c in variant.changes if not c.revertible for p in c.parts}
        reverted = {p for c in variant.changes if c.revertible for p in c.parts}
        assert measured == reverted - procedures, (task, report["parts"])
        assert set(variant.parts_reached) == reverted | unreverted
        assert procedures <= set(PROCEDURES)  # only a procedure may change without a module
        for part in (p for p in report["parts"] if p["procedure_only"]):
            assert part["params"]["classic"] == part["params"]["variant"] == 0 == part["flops"]["variant"]
        # Each change is visible in its own part at the sizes the earlier changes set (so Swin's window
        # attention must differ from global attention at the stage widths, not merely be wider), and no
        # difference is booked to a part its change does not name.
        lines = [line for p in report["parts"] for line in p["attribution"]]
        for change in (c for c in variant.changes if c.part not in procedures and c.revertible):
            own = [line for line in lines if line["change"] == change.name and line["kind"] == "own"]
            assert any(line["structure"] != "same" or line["params"]["delta"] for line in own), (task, change.name)
        assert not [line for line in lines if line["kind"] == "undeclared"], task
        for p in report["parts"]:  # the lines are measured differences that add up to the part's difference
            for key in ("params", "flops"):
                assert sum(line[key]["delta"] for line in p["attribution"]) == p[key]["delta"], (task, p["part"])
        text = render_markdown(report)  # a size set by another change is a line of its own, under that change
        for p in report["parts"]:
            for line in p["attribution"]:
                if line["kind"] == "resized":
                    assert f"| ↳ {p['part']}, resized by {line['change']} |" in text, (task, p["part"])


@pytest.mark.parametrize("name", zoo.list_variants())
def test_each_change_reverts_to_the_classic_choice(name):
    for task in zoo.tasks_of(name):
        variant = zoo.get_variant(name, task)
        classic = variant.config(None, **variant.classic_overrides())
        for change in variant.changes:
            if not change.revertible:  # says why instead, and has no ablation row (zoo.registry.Change)
                assert change.no_revert and not change.revert
                continue
            assert change.revert, f"{name}: change of {change.part} has no revert"
            reverted = variant.config(None, **change.revert)
            assert all(getattr(reverted, k) == getattr(classic, k) for k in change.revert)


def test_classic_layer_parameters_and_flops_match_hand_formulas():
    d, d_ff, heads, vocab = 32, 64, 4, 64
    model = build_transformer("tiny", encoder_layers=1, decoder_layers=1)
    S = T = 10
    src, tgt = zoo.get_variant("classic").example_input(model.config, {"batch": 1, "src_len": S, "tgt_len": T})
    per_module, total = module_flops(model, (src, tgt))
    # attention: Q, K, V, O projections 4·d² + 4·d parameters; FLOPs 2·MACs
    enc_attn = model.encoder.layers[0].self_attn
    assert sum(p.numel() for p in enc_attn.parameters()) == 4 * d * d + 4 * d
    assert per_module["encoder.layers.0.self_attn"] == 2 * S * d * 3 * d + 4 * S * S * d + 2 * S * d * d
    ffn = model.encoder.layers[0].ffn
    assert sum(p.numel() for p in ffn.parameters()) == 2 * d * d_ff + d_ff + d
    assert per_module["encoder.layers.0.ffn"] == 2 * 2 * S * d * d_ff
    cross = per_module["decoder.layers.0.cross_attn"]
    assert cross == 2 * T * d * d + 2 * S * d * 2 * d + 4 * T * S * d + 2 * T * d * d
    parts = flops_by_part(model, (src, tgt))
    assert parts["head"] == 2 * T * d * vocab
    assert parts["ffn"] == 2 * 2 * (S + T) * d * d_ff
    assert sum(parts.values()) == total
    assert heads == model.config.heads


def test_json_schema_is_stable():
    report = measure("rope", task_shape("translation"), preset="tiny")
    assert set(report) == {"schema", "variant", "task", "preset", "input", "paper", "summary", "changes", "parts",
                           "totals", "attribution", "attention_growth", "conventions", "activation_bytes",
                           "counterpart", "undeclared"}
    assert report["schema"] == 2
    assert report["counterpart"] == {"base": "classic", "preset": "tiny", "reference_sizes": True, "note": ""}
    assert report["undeclared"] == []  # a fair patch: no config field differs from classic's tiny undeclared
    assert set(report["changes"][0]) == {"name", "part", "classic", "variant", "flaw", "scope", "resizes", "also_in",
                                         "no_revert"}
    part = report["parts"][0]
    assert set(part) == {"part", "declared", "reached_by", "measured_change", "procedure_only", "flops_only",
                         "structure", "removed", "added", "params", "flops", "attribution", "at_variant_sizes"}
    (line,) = part["attribution"]  # one change: its one line is the whole difference
    assert line["change"] == "position" and line["kind"] == "own"
    assert line["params"]["delta"] == part["params"]["delta"] and line["flops"]["delta"] == part["flops"]["delta"]
    assert set(report["attribution"]) == {"method", "order", "changes"}
    assert report["attribution"]["order"] == ["position"]
    assert set(part["params"]) == set(part["flops"]) == {"classic", "variant", "delta", "delta_pct"}
    assert part["removed"] == {"SinusoidalPosition": 1} and part["added"] == {"RotaryPosition": 1}
    growth = report["attention_growth"]["classic"]
    assert growth["kernel_exponent"] == pytest.approx(2.0)  # softmax attention is quadratic in N
    json.dumps(report)  # serialisable


def test_pre_ln_adds_two_final_norms():
    report = measure("pre-ln", task_shape("translation"), preset="tiny")
    (norm,) = report["parts"]
    assert norm["part"] == "norm" and norm["added"] == {"LayerNorm": 2}
    assert norm["params"]["delta"] == 2 * 2 * 32


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: measure("rop", task_shape("translation")), "Did you mean 'rope'"),
        (lambda: task_shape("translaton"), "unknown task"),
        (lambda: zoo.get_variant("rope", "cifar"), "does not run on the cifar task"),
        (lambda: zoo.Change("attentoin", "a", "b", "c"), "Did you mean 'attention'"),
        (lambda: zoo.Change("attention", "a", "b", "c", scope="local"), "unknown scope"),
    ],
)
def test_unknown_names(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_diff_and_list_commands(capsys):
    assert main(["diff", "alibi", "--preset", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "What changed: `alibi`" in out and "ALiBiPosition" in out
    assert main(["diff", "alibi", "--preset", "tiny", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["variant"] == "alibi"
    assert main(["list", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert list(dict.fromkeys(r["name"] for r in rows)) == zoo.list_variants()
    assert main(["diff", "no-such-variant"]) == 2
    assert "unknown variant" in capsys.readouterr().err


def test_readme_variant_table_is_up_to_date():
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    match = re.search(r"<!-- variants:start -->\n(.*?)\n<!-- variants:end -->", readme, re.S)
    assert match, "README.md lacks the generated variant table markers"
    assert match.group(1).strip() == variants_markdown(variant_rows()).strip(), (
        "README variant table is out of date: regenerate it with `zoo list --format md`"
    )


def test_task_shapes_cover_every_task():
    for name in zoo.list_variants():
        for task in zoo.tasks_of(name):
            assert task_shape(task).name == task  # every task a variant runs on declares its shape
    assert set(PARTS) >= {"attention", "ffn", "position", "norm"}


@pytest.mark.slow
def test_compare_and_ablate_run_end_to_end(tmp_path, capsys):
    budget = ["--epochs", "1", "--quiet", "--set", "preset=tiny", "--set", "n_train=120", "--set", "eval_size=20",
              "--set", "beam_size=1"]
    assert main(["compare", "translation", "--variants", "classic,rope", "--out", str(tmp_path / "c"), *budget]) == 0
    rows = json.loads((tmp_path / "c" / "results.json").read_text())["rows"]
    assert [r["variant"] for r in rows] == ["classic", "rope"]
    assert rows[0]["delta"] == 0.0 and "long_bleu" in rows[0]["metrics"] and rows[1]["test"] == "bootstrap"
    assert (tmp_path / "c" / "metric_vs_cost.png").exists()
    assert main(["ablate", "pre-ln", "--task", "translation", "--out", str(tmp_path / "a"), *budget]) == 0
    rows = json.loads((tmp_path / "a" / "results.json").read_text())["rows"]
    assert [r["variant"] for r in rows] == ["pre-ln", "without norm"]
    assert rows[1]["verdict"] in ("better", "worse", "no significant difference")  # what the change bought
    (run,) = (tmp_path / "c").glob("classic-seed0-*")  # named by label, seed and a hash of its config
    report = (run / "report.md").read_text()
    assert "What changed" in report  # every zoo train report has the delta section
