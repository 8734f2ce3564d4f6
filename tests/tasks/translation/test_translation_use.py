"""Using a finished translation run: load_run, zoo evaluate (bit for bit), zoo predict, export, and their errors."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import zoo
from tasks.cli.main import main
from tasks.engine.distributed import DistInfo
from tasks.runs.evaluate import evaluate_run
from tasks.runs.export import export_run
from tasks.runs.records import read_records, split_hash
from tasks.runs.run import load_run
from tasks.runs.training import train
from tasks.translation.corpus import generate_corpus
from tasks.translation.predict import predict
from tasks.translation.task import TranslationConfig, TranslationTask
from tests.conftest import weight_dtypes

RECORD_KEYS = ["id", "source", "reference", "greedy", "beam", "sample", "chrf", "bleu"]


def write_parallel(folder: Path, splits: dict[str, list[tuple[str, str]]]) -> Path:
    """``train/valid/test.{en,de}`` in ``folder``: the plain aligned layout load_parallel reads."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        (folder / f"{split}.en").write_text("".join(en + "\n" for en, _ in pairs))
        (folder / f"{split}.de").write_text("".join(de + "\n" for _, de in pairs))
    return folder


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny classic run (BPE tokenizer, sampling in the report) on a folder of parallel text (about 10 s)."""
    root = tmp_path_factory.mktemp("translation_use")
    corpus = generate_corpus(seed=0, n_train=300, n_valid=16, n_test=24, n_long=8)
    data = write_parallel(root / "data", {k: corpus[k] for k in ("train", "valid", "test")})
    config = TranslationConfig(out=str(root / "run"), data=str(data), preset="tiny", epochs=5, lr=5e-3, batch_size=16,
                               warmup=20, eval_size=16, beam_size=2, temperature=0.8, progress=False)
    train(TranslationTask, config)
    return root / "run"


@pytest.fixture(scope="module")
def run(run_dir):
    return load_run(run_dir)


@pytest.fixture
def other_data(tmp_path) -> Path:
    """Another folder of parallel text, with words the run never saw."""
    return write_parallel(tmp_path / "other", {
        "train": [("a dog runs .", "ein Hund läuft .")],
        "valid": [("the zebra juggles .", "das Zebra jongliert ."), ("a cat sleeps .", "eine Katze schläft .")],
        "test": [("the horses run .", "die Pferde laufen .")],
    })


def test_run_json_holds_the_preprocessing(run):
    saved = run.preprocessing
    assert saved["tokenizer"] == "tokenizer.json" and saved["tokenizer_kind"] == "bpe"
    assert saved["vocab_size"] == run.task.tokenizer.vocab_size == run.variant_config.src_vocab
    assert (saved["src_lang"], saved["tgt_lang"], saved["beam_size"], saved["length_penalty"]) == ("en", "de", 2, 0.6)


def test_evaluate_reproduces_the_training_numbers_and_records(run_dir, tmp_path):
    run = load_run(run_dir)  # a fresh one: evaluate_run calls setup() on its task
    metrics, out = evaluate_run(run, out=tmp_path / "eval")
    assert metrics == json.loads((run_dir / "metrics.json").read_text())["final"]
    trained, trained_hash = read_records(run_dir, "test")
    again, again_hash = read_records(out, "test")
    assert again == trained and again_hash == trained_hash
    assert list(trained[0]) == RECORD_KEYS and [r["id"] for r in trained] == list(range(24))
    pairs = run.task.splits["test"]
    assert trained_hash == split_hash(text for pair in pairs for text in pair)
    assert [(r["source"], r["reference"]) for r in trained] == pairs
    assert any(r["greedy"] for r in trained)  # the tiny model does translate something
    assert all(0 <= r["chrf"] <= 100 and 0 <= r["bleu"] <= 100.0001 for r in trained)


def test_restored_setup_keeps_the_tokenizer_and_skips_training_data(run, run_dir):
    tokenizer = run.task.tokenizer
    run.task.setup()
    assert run.task.tokenizer is tokenizer and not hasattr(run.task, "train_rows")
    generated = TranslationTask(TranslationConfig(n_train=300), torch.device("cpu"), DistInfo())
    generated.restore(run.preprocessing, run_dir)
    generated.setup()  # the embedded corpus, encoded with the run's BPE tokenizer
    assert generated.tokenizer_kind == "bpe" and {"test", "test_long"} <= set(generated.splits)


def test_evaluate_on_another_folder(run_dir, other_data, tmp_path):
    run = load_run(run_dir)
    metrics, out = evaluate_run(run, data=other_data, split="valid", out=tmp_path / "eval")
    assert set(metrics) == {"valid", "bleu_signature"}
    records, data_hash = read_records(out, "valid")
    assert [r["source"] for r in records] == ["the zebra juggles .", "a cat sleeps ."]
    assert data_hash == split_hash(["the zebra juggles .", "das Zebra jongliert .", "a cat sleeps .",
                                    "eine Katze schläft ."])
    with pytest.raises(ValueError, match=r"has no 'test_long' split \(it has: test, valid\)"):
        evaluate_run(load_run(run_dir), data=other_data, split="test_long", out=tmp_path / "long")


SENTENCES = ["the happy girl laughs .", "", "  the horses run .  ", "a big dog sees the red ball .", "a cat sleeps ."]


def test_predict_one_line_per_input_in_order(run, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    backwards = tmp_path / "backwards.txt"
    backwards.write_text("\n".join(reversed(SENTENCES)))  # no newline at the end: the same lines
    summary = predict(run, [str(source)], str(tmp_path / "out.txt"), progress=False)
    predict(run, [str(backwards)], str(tmp_path / "back.txt"), progress=False)
    lines = (tmp_path / "out.txt").read_text().split("\n")
    assert lines[-1] == "" and len(lines[:-1]) == len(SENTENCES)
    assert lines[1] == "" and all(lines[i] for i in (0, 2, 3, 4))
    assert (tmp_path / "back.txt").read_text().split("\n")[:-1] == lines[:-1][::-1]
    assert summary.startswith("translated 4 sentences (and kept 1 empty line empty) with greedy decoding on cpu")


@pytest.mark.parametrize("trained_in, computes_in", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_predict_computes_in_the_precision_the_run_trained_in(run_dir, tmp_path, trained_in, computes_in):
    run = load_run(run_dir)
    run.info["precision"] = trained_in  # what a --precision bf16 run records in run.json
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    with weight_dtypes(run.model) as seen:
        predict(run, [str(tmp_path / "in.txt")], str(tmp_path / "out.txt"), progress=False)
    assert run.precision == trained_in and seen == {computes_in}
    assert all(p.dtype == torch.float32 for p in run.model.parameters())  # the copies were for the block only


def test_predict_decodes_as_the_evaluation_did(run, run_dir, tmp_path):
    records, _ = read_records(run_dir, "test")
    source = tmp_path / "test.en"
    source.write_text("".join(r["source"] + "\n" for r in records))
    for options, key in (({}, "greedy"), ({"beam_size": 2}, "beam")):
        predict(run, [str(source)], str(tmp_path / f"{key}.txt"), progress=False, **options)
        assert (tmp_path / f"{key}.txt").read_text().splitlines() == [r[key] for r in records], key
    sampled = [predict(run, [str(source)], str(tmp_path / f"s{i}.txt"), False, temperature=0.8, top_k=3, top_p=0.9)
               for i in range(2)]
    assert (tmp_path / "s0.txt").read_text() == (tmp_path / "s1.txt").read_text()  # seeded with the run's seed
    assert "sampling (temperature 0.8, top_k 3, top_p 0.9)" in sampled[0]


def test_predict_reads_standard_input(run, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"the horses run .\n\n")))
    predict(run, [], None, progress=False)
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 3 and lines[0] and lines[1] == lines[2] == ""


def test_export_predicts_identically(run, run_dir, tmp_path):
    exported = load_run(export_run(run_dir, tmp_path / "export"))
    assert exported.weights.suffix == ".safetensors" and exported.preprocessing == run.preprocessing
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES))
    for name, r in (("a", run), ("b", exported)):
        predict(r, [str(source)], str(tmp_path / f"{name}.txt"), progress=False, beam_size=2)
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()


def test_source_limit_follows_a_learned_position_table(run):
    learned = SimpleNamespace(config=SimpleNamespace(position="learned", max_len=100))
    assert run.task.source_limit(learned) == 99
    assert run.task.source_limit(run.model) == run.config.max_len == 256  # sinusoidal positions extrapolate
    tok = run.task.tokenizer
    model = zoo.create("learned-pos", "tiny", src_vocab=tok.vocab_size, tgt_vocab=None, max_len=12).eval()
    assert run.task.source_limit(model) == 11
    (hyp,) = run.task.translate(model, [" ".join(["the dog"] * 20)])  # cut to 11 tokens, decoded up to 12
    assert len(tok.encode(hyp)) <= 12


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    files = {"empty": b"", "latin1": "a caf\xe9 .\n".encode("latin-1"), "long": ("ok .\n" + "the " * 300).encode()}
    paths = {name: tmp_path / f"{name}.txt" for name in files}
    for name, data in files.items():
        paths[name].write_bytes(data)
    return paths


@pytest.mark.parametrize(("input_name", "options", "error", "message"), [
    ("missing", {}, FileNotFoundError, r"input file .*missing\.txt not found"),
    ("folder", {}, ValueError, r"is a folder; give the text files in it"),
    ("empty", {}, ValueError, r"no input: .*empty\.txt holds no lines"),
    ("latin1", {}, ValueError, r"latin1\.txt is not UTF-8 text \(line 1: byte 0xe9\)"),
    ("long", {}, ValueError, r"long\.txt, line 2: 300 tokens, but this model takes sources of at most 256 tokens"),
    ("ok", {"top_k": 5}, ValueError, r"--top-k/--top-p restrict sampling: give them with --temperature > 0"),
    ("ok", {"temperature": -1.0}, ValueError, r"--temperature must be >= 0"),
    ("ok", {"temperature": 1.0, "beam_size": 4}, ValueError, r"two decoding methods"),
    ("ok", {"temperature": 1.0, "top_p": 1.5}, ValueError, r"--top-p must be in \(0, 1\]"),
    ("ok", {"batch_size": 0}, ValueError, r"--batch-size must be > 0"),
    ("ok", {"beam_size": 0}, ValueError, r"--beam-size must be > 0"),
])
def test_predict_errors(run, tmp_path, input_name, options, error, message):
    paths = {**_bad_inputs(tmp_path), "missing": tmp_path / "missing.txt", "folder": tmp_path}
    paths["ok"] = tmp_path / "ok.txt"
    paths["ok"].write_text("ok .\n")
    with pytest.raises(error, match=message):
        predict(run, [str(paths[input_name])], str(tmp_path / "out.txt"), progress=False, **options)


def test_predict_refuses_empty_standard_input_and_a_folder_as_out(run, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    with pytest.raises(ValueError, match="no input: standard input holds no lines"):
        predict(run, [], None, progress=False)
    with pytest.raises(ValueError, match="--out .* is a folder"):
        predict(run, [], str(tmp_path), progress=False)


def test_cli(run_dir, other_data, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES))
    assert main(["predict", str(run_dir), str(source), "--out", str(tmp_path / "out.txt"), "--beam-size", "2",
                 "--quiet"]) == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == len(SENTENCES)
    assert "with beam search (beam 2)" in capsys.readouterr().out
    latin1 = _bad_inputs(tmp_path)["latin1"]
    assert main(["predict", str(run_dir), str(latin1)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"zoo predict: error: {latin1} is not UTF-8 text (line 1: byte "
                                                    "0xe9); convert it, e.g. `iconv -f latin1 -t utf-8`")
    assert main(["evaluate", str(run_dir), "--data", str(other_data), "--out", str(tmp_path / "eval")]) == 0
    assert "greedy_bleu" in capsys.readouterr().out and (tmp_path / "eval/predictions/test.jsonl").is_file()
    assert main(["evaluate", str(run_dir), "--data", str(other_data), "--split", "test_long"]) == 2
    assert "zoo evaluate: error: " in capsys.readouterr().err


def test_onnx_export_translates_like_pytorch_through_onnxruntime(run_dir, tmp_path):
    """The encoder and decoder-step graphs, checked at export on the run's test pairs, decode (greedy and beam,
    recomputing the prefix: the step graph has no cache) as the PyTorch model does."""
    out = export_run(run_dir, tmp_path / "onnx", "onnx")
    checks = json.loads((out / "run.json").read_text())["onnx_check"]
    assert set(checks) == {"encoder", "decoder_step"}
    assert all(c["max_abs_diff"] <= c["limit"] for c in checks.values())
    assert "tokens [8, " in checks["decoder_step"]["examples"]  # checked at the test prefixes' full length
    sources = [en for en, _ in generate_corpus(seed=0, n_train=300, n_valid=16, n_test=24, n_long=8)["test"]]
    torch_run, ort_run = load_run(run_dir), load_run(out, runtime="onnxruntime")
    for method in ("greedy", "beam"):
        a = torch_run.task.translate(torch_run.model, sources, method, beam_size=2)
        b = ort_run.task.translate(ort_run.model, sources, method, beam_size=2)
        same = sum(x == y for x, y in zip(a, b))
        assert same >= 0.9 * len(sources), (method, same)  # float32 near-ties aside, the same translations
    with torch.no_grad():
        src = torch.tensor([[5, 6, 7, 2]])
        memory, mask = ort_run.model.encode(src)
        expected, _ = torch_run.model.encode(src)
        torch.testing.assert_close(memory, expected, atol=1e-4 * max(1.0, expected.abs().max().item()), rtol=0)
