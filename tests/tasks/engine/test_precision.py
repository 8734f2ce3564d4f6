"""--precision: the policy (default / fp32 / bf16 / auto), the bf16 weight copies, and the records a run keeps.

bf16 numerics are checked against float32 on a tiny classic Transformer with a tolerance scaled to
bfloat16's 8-bit mantissa (eps 2^-8 = 3.9e-3); the tests that run the trainer in bf16 patch the CPU
detection, so they also run (emulated) on CPUs without AMX / AVX512-BF16.
"""

import json

import pytest
import torch
from torch import nn

import tasks.engine.precision as precision
from core.model import build_transformer
from tasks.engine.precision import Precision, bf16_weights, eval_context, resolve
from tasks.engine.trainer import Trainer
from tasks.runs.training import callbacks_for
from tests.conftest import copy_batch
from tests.toy_task import ToyConfig, ToyTask

CPU = torch.device("cpu")
BF16 = Precision("bf16", "bf16", "test")
FP32 = Precision("fp32", "fp32", "test")


@pytest.fixture
def native(monkeypatch):
    """A CPU with native bf16, whatever this one has."""
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: ("avx512_bf16",))


@pytest.fixture
def no_native(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: ())


def train(tmp_path, name, **kw):
    config = ToyConfig(out=str(tmp_path / name), progress=False, epochs=1, **kw)
    trainer = Trainer(ToyTask, config, callbacks=callbacks_for(config))
    return trainer, trainer.fit()


def tiny_model():
    torch.manual_seed(0)
    return build_transformer("tiny", src_vocab=16, d_model=32, heads=4, d_ff=64)


def loss_of(model, src, tgt, mode: Precision):
    with mode.context(model, CPU):
        logits = model(src, tgt[:, :-1])  # (B, T, V)
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=0)


# --- the policy -------------------------------------------------------------------------------------------
def test_default_and_fp32_on_cpu_compute_in_float32(native):
    assert resolve("default", CPU).used == "fp32"
    assert resolve("fp32", CPU).used == "fp32"
    assert resolve("bf16", CPU).used == "bf16" and resolve("bf16", CPU).cast_weights


def test_default_on_cpu_trains_bit_for_bit_like_fp32(tmp_path):
    """Same computation twice on one machine (tests/README.md rule 5): default adds nothing on the CPU."""
    default, a = train(tmp_path, "default")
    fp32, b = train(tmp_path, "fp32", precision="fp32")
    assert [r["train_loss"] for r in a["history"]] == [r["train_loss"] for r in b["history"]]
    for (name, x), (_, y) in zip(default.model.state_dict().items(), fp32.model.state_dict().items()):
        assert torch.equal(x, y), name
    assert default.precision_used == fp32.precision_used == a["precision"] == "fp32"


def test_bf16_refused_without_native_bf16(no_native, tmp_path):
    with pytest.raises(ValueError, match=r"amx_bf16 and avx512_bf16.*--precision fp32") as error:
        resolve("bf16", CPU)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="amx_bf16"):  # before any data loads
        Trainer(ToyTask, ToyConfig(out=str(tmp_path / "r"), precision="bf16", progress=False))


def test_auto_without_native_bf16_is_fp32_without_probing(no_native):
    def probe():
        raise AssertionError("a CPU without bf16 needs no probe")

    chosen = resolve("auto", CPU, probe)
    assert chosen.used == "fp32" and "lacks" in chosen.reason


@pytest.mark.parametrize("value", ["fp16", "BF16", "", None])
def test_bad_precision_is_a_one_line_error(value):
    with pytest.raises(ValueError, match="precision") as error:
        ToyConfig(precision=value)
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="precision"):
        resolve(value, CPU)


def test_cpu_flags_are_read_from_cpuinfo(monkeypatch):
    lines = ["processor\t: 0", "flags\t\t: fpu sse avx512f avx512_bf16 amx_tile"]
    monkeypatch.setattr(precision, "_cpuinfo_lines", lambda: lines)
    assert precision.cpu_bf16_flags() == ("avx512_bf16",)
    assert precision.native_bf16(CPU)[0]


# --- the bf16 path ----------------------------------------------------------------------------------------
def test_bf16_loss_and_gradients_agree_with_fp32():
    """Measured (AMX CPU, ATEN_CPU_CAPABILITY avx512 and default alike): loss 3.8083 vs 3.8092, relative
    Δ 2.3e-4; gradients' relative error 2.0e-2 (bf16 rounds each activation to 8 bits). The tolerances are
    20x and 6x these; a wrong cast, scale or a weight left out of the graph moves them by O(1)."""
    model = tiny_model().train()
    for module in model.modules():  # dropout off: both precisions must see the same network
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    src, tgt = copy_batch(torch.Generator().manual_seed(0))
    grads = {}
    losses = {}
    for mode in (FP32, BF16):
        model.zero_grad(set_to_none=True)
        loss = loss_of(model, src, tgt, mode)
        loss.backward()
        losses[mode.used] = loss.item()
        grads[mode.used] = torch.cat([p.grad.flatten() for p in model.parameters()])
        assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    assert abs(losses["bf16"] - losses["fp32"]) <= 5e-3 * abs(losses["fp32"])
    relative = (grads["bf16"] - grads["fp32"]).norm() / grads["fp32"].norm()
    assert relative < 0.12, relative


def test_bf16_training_follows_fp32_and_keeps_float32_master_weights():
    """Twenty Adam steps on the copy task: the loss curves agree within bf16 noise (measured max |Δ| 4.4e-3
    with avx512 kernels, 2.8e-3 with default ones, on a loss falling 3.71 -> 2.21) and the optimizer's state
    stays float32."""
    curves = {}
    for mode in (FP32, BF16):
        model = tiny_model()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        gen = torch.Generator().manual_seed(1)
        curve = []
        for _ in range(20):
            src, tgt = copy_batch(gen)
            loss = loss_of(model, src, tgt, mode)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            curve.append(loss.item())
        curves[mode.used] = curve
        assert all(t.dtype == torch.float32 for s in optimizer.state.values() for t in s.values() if t.numel() > 1)
    assert curves["fp32"][-1] < curves["fp32"][0] - 0.5  # it learned: the comparison is not of two flat lines
    gap = max(abs(a - b) for a, b in zip(curves["fp32"], curves["bf16"]))
    assert gap < 0.1, gap


def test_bf16_weights_are_swapped_for_the_block_only():
    model = tiny_model()
    before = {name: p for name, p in model.named_parameters()}
    seen = {}

    def look(module, args):
        seen[type(module).__name__] = module.weight.dtype

    model.encoder.layers[0].norm1.register_forward_pre_hook(look)
    src, tgt = copy_batch(torch.Generator().manual_seed(0))
    with bf16_weights(model):
        inside = list(model.parameters())  # deduplicated by identity: tied weights must share one copy
        assert len(inside) == len(before) and all(p.dtype == torch.bfloat16 for p in inside)
        logits = model(src, tgt[:, :-1])
    assert logits.dtype == torch.bfloat16  # the stream stayed bf16 to the logits
    assert seen["LayerNorm"] == torch.bfloat16
    assert all(p is before[name] and p.dtype == torch.float32 for name, p in model.named_parameters())


def test_batch_norm_keeps_float32_parameters_and_running_statistics():
    """Batch norm updates its running statistics in the forward: they must land in the module's own buffers."""
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))
    with Precision("bf16", "bf16", "test").context(model, CPU):
        model(torch.randn(16, 4))
        assert model[1].weight.dtype == torch.float32 and model[0].weight.dtype == torch.bfloat16
    assert model[1].num_batches_tracked.item() == 1 and model[1].running_mean.abs().sum() > 0


def test_eval_context_follows_the_recorded_precision():
    model = tiny_model().eval()
    src, tgt = copy_batch(torch.Generator().manual_seed(0))
    with torch.no_grad():
        for recorded, dtype in ((None, torch.float32), ("fp32", torch.float32), ("bf16", torch.bfloat16)):
            with eval_context(recorded, model, CPU):
                assert model(src, tgt[:, :-1]).dtype == dtype
    with pytest.raises(ValueError, match="run.json says precision 'half'"):
        eval_context("half", model, CPU)


# --- runs record what they used ------------------------------------------------------------------------------
def test_bf16_run_records_its_precision(native, tmp_path):
    trainer, summary = train(tmp_path, "bf16", precision="bf16")
    out = tmp_path / "bf16"
    assert trainer.precision_used == summary["precision"] == "bf16"
    assert "asked for bf16" in summary["precision_reason"]
    assert json.loads((out / "run.json").read_text())["precision"] == "bf16"
    assert json.loads((out / "metrics.json").read_text())["precision"] == "bf16"
    assert summary["final"] is not None and torch.isfinite(torch.tensor(summary["best_valid"]))


def test_auto_probes_records_and_caches_its_choice(native, tmp_path, monkeypatch):
    """The second run finds the first one's answer in the cache and skips the probe; as it trains bit for bit
    like the first, the probe left the model and every random generator as they were."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    trainer, summary = train(tmp_path, "auto", precision="auto")
    assert trainer.precision_used in ("fp32", "bf16")
    assert summary["precision"] == trainer.precision_used
    assert summary["precision_reason"].startswith(f"auto: {trainer.precision_used} (median step fp32")
    assert json.loads((tmp_path / "auto" / "run.json").read_text())["precision"] == trainer.precision_used
    cache = json.loads((tmp_path / "cache" / precision.CACHE_FILE).read_text())
    assert [entry["used"] for entry in cache.values()] == [trainer.precision_used]
    again, repeat = train(tmp_path, "again", precision="auto")
    assert again.precision_used == trainer.precision_used and "cached probe" in repeat["precision_reason"]
    assert [r["train_loss"] for r in summary["history"]] == [r["train_loss"] for r in repeat["history"]]


def test_the_probe_is_cached_by_what_changes_a_steps_time(native, tmp_path, monkeypatch):
    """The cache key is tasks.engine.same_run.timing_settings: checkpoints, the doctor and the learning-rate schedule
    do not change how long a step takes (before issue 35 --checkpoint-every and --track probed again); the
    batch size does."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    train(tmp_path, "first", precision="auto")
    _, same = train(tmp_path, "same", precision="auto", checkpoint_every=3, doctor=True, lr=0.02, warmup=7)
    assert "cached probe" in same["precision_reason"]
    _, other = train(tmp_path, "other", precision="auto", batch_size=4)
    assert "cached probe" not in other["precision_reason"]
