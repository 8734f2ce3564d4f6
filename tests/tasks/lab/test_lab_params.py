"""Lesson `params`: exact counts, the article's estimate, and the vocabulary share with tying on and off."""

import torch

from core.accounting import attention_parameters
from core.model import build_transformer
from tasks.lab import LabSettings, run_lesson
from tasks.lab.params import TYINGS, VOCABULARIES, article_vs_exact, exact_count, meta_model
from tests.tasks.lab.zh_checks import assert_chinese


def test_exact_count_is_the_number_of_unique_parameters():
    model = build_transformer("tiny", src_vocab=50, share_embeddings=False, tie_output=False)
    count = exact_count("tiny", src_vocab=50, share_embeddings=False, tie_output=False)
    assert count["total"] == sum(p.numel() for p in model.parameters())
    assert sum(count["by_part"].values()) == count["total"] and count["formula_matches"]
    assert count["vocabulary"] == 3 * 50 * 32  # source, target and output matrices, D = 32


def test_meta_models_hold_no_memory():
    model = meta_model("big")
    assert all(p.device == torch.device("meta") for p in model.parameters())


def test_article_estimate_misses_exactly_cross_attention_and_norms():
    base = article_vs_exact("base")
    d, layers_enc, layers_dec = 512, 6, 6
    assert base["article_per_layer"] == attention_parameters(d) + 2 * d * 2048 + 2048 + d  # 3.15 M
    assert base["cross_attention"] == layers_dec * attention_parameters(d)
    assert base["norms"] == (2 * layers_enc + 3 * layers_dec) * 2 * d
    assert base["exact_layers"] - base["article_total"] == base["cross_attention"] + base["norms"]
    assert base["missed_is_cross_attention_and_norms"]


def test_lesson_counts_and_writes(tmp_path):
    result = run_lesson("params", LabSettings(tmp_path, quick=True, scale=0.1, progress=False))
    assert result.holds
    rows = result.findings["vocabulary_sweep"]
    share = {(r["tying"], r["vocab"]): r["share"] for r in rows}
    for tying in TYINGS:  # the share grows with the vocabulary ...
        values = [share[tying, v] for v in VOCABULARIES]
        assert values == sorted(values) and values[0] < values[-1]
    for vocab in VOCABULARIES:  # ... and tying lowers it
        assert share["three-way tied", vocab] < share["shared, separate output", vocab] < share["untied", vocab]
    assert all(r["formula_matches"] for r in rows)
    base = result.findings["base"]["exact"]
    assert base["total"] == 63_082_496 and base["by_part"]["embedding"] == 37_000 * 512
    assert (tmp_path / "lesson.md").exists() and (tmp_path / "params.png").exists()
    assert "37.80 M" in result.verdict[0] and "%" in result.verdict[1]
    assert_chinese("params", result, tmp_path)
