"""``--compile`` (tasks.engine.compiled): compiled equals eager, plain checkpoints, resume under the flag, fallback.

Compiling costs seconds per graph on a CPU, so one test compiles one tiny model for real (a 1+1-layer
translation Transformer in float64: loss and gradients against eager, two batch shapes, no recompilation);
the others replace ``torch.compile`` by a stand-in that records how it was called and runs the module
eagerly, which checks the wiring (what is compiled, what is saved, what stays eager) at no cost.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from core.decoding import greedy_decode
from core.model import build_transformer
from tasks.engine.checkpoint import load_checkpoint
from tasks.engine.compiled import CHECK_TOLERANCE, CompiledModel, compile_for_trainer, dynamic_shapes
from tasks.engine.trainer import Trainer
from tests.numerics import assert_close_fp64, float64
from tests.preemption import preempted_after
from tests.toy_task import ToyConfig, ToyTask


def tiny_translation_model() -> nn.Module:
    torch.manual_seed(0)
    return build_transformer("tiny", src_vocab=16, d_model=16, heads=2, d_ff=32, encoder_layers=1,
                             decoder_layers=1, dropout=0.0)  # no dropout: compiled code draws other masks


def loss_and_grads(model: nn.Module, plain: nn.Module, src: torch.Tensor, tgt: torch.Tensor):
    plain.zero_grad(set_to_none=True)
    logits = model(src, tgt[:, :-1])  # (B, T - 1, V)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in plain.named_parameters()}


@float64()
def test_compiled_translation_model_equals_eager_without_recompiling():
    """The one real compilation: float64 both ways (tests/README.md rule 1), so the two may differ only by
    float64 rounding of reordered sums; a second batch of other lengths and size reuses the graphs."""
    eager, plain = tiny_translation_model(), tiny_translation_model()
    compiled = CompiledModel(plain, dynamic_shapes(True), "tiny")
    gen = torch.Generator().manual_seed(0)
    for i, (batch, src_len, tgt_len) in enumerate([(4, 6, 8), (3, 9, 5)]):  # lengths as buckets vary them
        src = torch.randint(3, 16, (batch, src_len), generator=gen)
        src[0, -2:] = 0  # padding: the masks go through the compiled graphs too
        tgt = torch.randint(3, 16, (batch, tgt_len), generator=gen)
        graphs = counters["stats"]["unique_graphs"]
        loss, grads = loss_and_grads(compiled, plain, src, tgt)
        if compiled.fallback_reason is not None:
            # Under ATEN_CPU_CAPABILITY=default inductor's C++ fails to compile; on one CI machine's CPU its code
            # computed a loss 1.3 % off eager's, which the check against eager now catches (the tests below).
            pytest.skip(f"inductor did not give eager's numbers here ({compiled.fallback_reason}); "
                        "CompiledModel fell back to eager")
        assert compiled.checked == {(True, True): "matched"}
        if i == 1:
            assert counters["stats"]["unique_graphs"] == graphs, "a new batch length recompiled the model"
        want_loss, want_grads = loss_and_grads(eager, eager, src, tgt)
        assert_close_fp64(loss, want_loss)
        assert_close_fp64(grads, want_grads)
    assert list(compiled.state_dict()) == list(eager.state_dict())  # no _orig_mod. / module. prefixes


@pytest.mark.parametrize("task, name", [("translation", "classic"), ("cifar", "vit"), ("cifar", "swin")])
def test_models_trace_as_one_graph(task, name):
    """No graph breaks (dynamo's tracer alone, no compiler: cheap). The token-id range check used to read the ids
    (``int(ids.min())``) and split the translation model into pieces; MoE's data-dependent dispatch still does."""
    from zoo.registry import create

    model = create(name, preset="tiny", task=task).eval()
    gen = torch.Generator().manual_seed(0)
    inputs = ((torch.randint(3, 16, (2, 6), generator=gen), torch.randint(3, 16, (2, 5), generator=gen))
              if task == "translation" else (torch.randn(2, 3, 32, 32, generator=gen),))
    explained = torch._dynamo.explain(model)(*inputs)
    torch._dynamo.reset()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


class StandIn:
    """What the fake ``torch.compile`` returns: runs the module eagerly, counts calls."""

    def __init__(self, module: nn.Module, calls: list, error: Exception | None) -> None:
        self.module, self.calls, self.error = module, calls, error

    def __call__(self, *args, **kwargs):
        self.calls.append(self.module.training)
        if self.error is not None:
            raise self.error
        return self.module(*args, **kwargs)


@pytest.fixture
def fake_compile(monkeypatch):
    """Replace torch.compile; returns a record: ``dynamic`` of each compile, forward calls, an error to raise."""
    record = {"dynamic": [], "calls": [], "error": None}

    def compile(module, dynamic=None, **kwargs):
        record["dynamic"].append(dynamic)
        return StandIn(module, record["calls"], record["error"])

    monkeypatch.setattr(torch, "compile", compile)
    return record


def train(tmp_path, name: str, **kwargs) -> Trainer:
    trainer = Trainer(ToyTask, ToyConfig(out=str(tmp_path / name), progress=False, **kwargs))
    trainer.fit()
    return trainer


def test_trainer_trains_and_evaluates_through_the_compiled_forward(tmp_path, fake_compile):
    train(tmp_path, "run", epochs=2, compile=True)
    assert fake_compile["dynamic"] == [None]  # one compilation: training and evaluation share it; static shapes
    assert True in fake_compile["calls"] and False in fake_compile["calls"]  # training and evaluation forwards
    plain = ToyTask(ToyConfig(), torch.device("cpu"), None).build_model()
    for name in ("last.pt", "best.pt"):
        state = load_checkpoint(tmp_path / "run" / "checkpoints" / name)["model"]
        assert list(state) == list(plain.state_dict())  # plain keys: loads into the plain module as it is
        plain.load_state_dict(state)


def test_a_compiled_run_resumes_compiled_and_only_compiled(tmp_path, fake_compile):
    """A compiled run resumes exactly; resumed without --compile (or an eager run with it) is another run
    (tasks.engine.same_run: compiled code rounds differently and draws other dropout masks), refused naming the flag.
    The stand-in computes eagerly, so the runs are one computation: bit for bit (tests/README.md rule 5)."""
    full = train(tmp_path, "full", epochs=2, compile=True)
    with preempted_after(9):  # in the second epoch
        train(tmp_path, "split", epochs=2, compile=True)
    with pytest.raises(ValueError, match=r"compile: checkpoint True vs now False \(compiled code rounds"):
        train(tmp_path, "split", epochs=2, resume=True, compile=False)
    resumed = train(tmp_path, "split", epochs=2, resume=True, compile=True)
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    assert [r["mse"] for r in full.history] == [r["mse"] for r in resumed.history]


def test_compilation_failure_warns_once_and_runs_eagerly(fake_compile, caplog):
    fake_compile["error"] = torch._dynamo.exc.InternalTorchDynamoError("no C++ compiler found\nmore detail")
    model = nn.Linear(3, 2)
    compiled = CompiledModel(model, label="classic")
    x = torch.randn(4, 3)
    with caplog.at_level(logging.WARNING, logger="tasks.engine.compiled"):
        first, second = compiled(x), compiled(x)
    assert torch.equal(first, model(x)) and torch.equal(second, model(x))
    assert len(fake_compile["calls"]) == 1  # not retried at every step
    assert compiled.fallback_reason == "InternalTorchDynamoError: no C++ compiler found"
    [record] = caplog.records
    assert "torch.compile failed on classic (InternalTorchDynamoError: no C++ compiler found)" in record.getMessage()


def test_an_error_of_the_model_itself_is_not_swallowed(fake_compile):
    fake_compile["error"] = ValueError("src_ids holds ids in [0, 99] but the vocabulary has 16 entries")
    compiled = CompiledModel(nn.Linear(3, 2))
    with pytest.raises(ValueError, match="vocabulary has 16"):
        compiled(torch.randn(1, 3))
    assert compiled.fallback_reason is None


def miscompile(monkeypatch, error: float) -> None:
    """Make the stand-in compiler's code compute the module's output plus ``error`` times its magnitude."""
    def call(self, *args):
        self.calls.append(self.module.training)
        out = self.module(*args)
        return out + error * out.detach().abs().max()
    monkeypatch.setattr(StandIn, "__call__", call)


def batch_norm_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


@pytest.mark.parametrize("error", [0.0, 1e-5, 1e-2])
def test_the_first_call_is_compared_with_eager_and_a_miscompiled_model_runs_eagerly(fake_compile, monkeypatch,
                                                                                    caplog, error):
    """A relative error of 1e-5 is float32 rounding (kept); 1e-2 is a wrong result (the CI machine's 1.3 %)."""
    miscompile(monkeypatch, error)
    model, eager = batch_norm_model(), batch_norm_model()
    compiled = CompiledModel(model, label="classic")
    x = torch.randn(8, 3)
    rng_before = torch.get_rng_state()
    with caplog.at_level(logging.WARNING, logger="tasks.engine.compiled"):
        out = compiled(x)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the forward draws nothing: neither did the check
    want = eager(x)
    # The eager reference left no trace: batch-norm statistics updated once, by the call that was returned.
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, dict(eager.named_buffers())[name]), name
    wrong = error > CHECK_TOLERANCE[torch.float32]
    assert compiled.checked == {(True, True): "differed" if wrong else "matched"}
    if wrong:
        torch.testing.assert_close(out, want, rtol=0, atol=0)  # eager's output, with its gradients
        assert compiled.fallback_reason.startswith("its output differs from eager's: the output: largest difference")
        [record] = caplog.records
        assert record.getMessage().startswith("torch.compile miscomputed classic (its output differs")
        compiled(x)
        assert len(fake_compile["calls"]) == 1  # eager from then on
    else:
        torch.testing.assert_close(out, want, rtol=0, atol=1.01 * error * want.abs().max().item())
        assert compiled.fallback_reason is None and not caplog.records
    out.sum().backward()  # the result trains: its graph reaches the parameters
    assert model[0].weight.grad is not None


@pytest.mark.parametrize("error", [0.0, 1e-2])
def test_a_random_forward_is_compared_in_evaluation_instead(fake_compile, monkeypatch, error):
    """With dropout, training outputs depend on the draw (compiled code draws other numbers): not comparable,
    so no false alarm there; the same batch is compared in evaluation mode at once, which catches wrong code."""
    miscompile(monkeypatch, error)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16), nn.Dropout(0.5), nn.Linear(16, 2))
    compiled = CompiledModel(model)
    x = torch.randn(8, 3)
    compiled(x)
    assert model.training  # the evaluation check put the mode back
    verdict = "differed" if error else "matched"
    assert compiled.checked == {(True, True): "random", (False, False): verdict}
    assert (compiled.fallback_reason is None) == (not error)
    if error:
        assert compiled.fallback_reason.startswith("its output differs from eager's: in evaluation mode, the output")
    calls = len(fake_compile["calls"])
    compiled(x)
    assert len(fake_compile["calls"]) == calls + (0 if error else 1)  # not probed again; eager after a mismatch
    compiled.eval()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=1.01 * error * model(x).abs().max().item())


def test_the_check_compares_every_output_and_can_be_turned_off(fake_compile, monkeypatch):
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Linear(3, 2)

        def forward(self, x):
            return {"logits": self.body(x), "ids": self.body(x).argmax(-1)}

    def call(self, *args):  # right logits, wrong ids
        out = self.module(*args)
        return {"logits": out["logits"], "ids": 1 - out["ids"]}

    monkeypatch.setattr(StandIn, "__call__", call)
    x = torch.randn(8, 3)
    compiled = CompiledModel(TwoHeads())
    compiled(x)
    assert compiled.fallback_reason.startswith("its output differs from eager's: output['ids']: 8 of 8 entries differ")
    unchecked = CompiledModel(TwoHeads(), check=False)
    assert torch.equal(unchecked(x)["ids"], 1 - unchecked.module(x)["ids"]) and unchecked.checked == {}


class Tagged(torch.Tensor):
    """A tensor subclass, as MONAI's MetaTensor is (medseg's augmented batches)."""


def test_tensor_subclass_inputs_reach_the_compiled_graph_as_plain_tensors(fake_compile, monkeypatch):
    seen = []
    model = nn.Linear(3, 2)
    monkeypatch.setattr(StandIn, "__call__", lambda self, x: seen.append(type(x)) or self.module(x))
    x = torch.randn(4, 3).as_subclass(Tagged)
    out = CompiledModel(model)(x)
    assert seen == [torch.Tensor]
    torch.testing.assert_close(out, model(x.as_subclass(torch.Tensor)), rtol=0, atol=0)


def test_decoding_stays_eager(fake_compile):
    """Decoding calls encode/decode with a growing KV cache, never the compiled forward."""
    model = tiny_translation_model().eval()
    compiled = CompiledModel(model)
    src = torch.randint(3, 16, (2, 5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(greedy_decode(compiled, src, max_len=8), greedy_decode(model, src, max_len=8))
    assert fake_compile["calls"] == []
    compiled(src, src)  # the teacher-forced forward is the compiled one
    assert fake_compile["calls"] == [False]


def test_wrapper_is_the_plain_module_but_for_its_forward(fake_compile):
    model = tiny_translation_model()
    compiled = CompiledModel(model)
    assert compiled.config is model.config and compiled.encode.__self__ is model
    assert list(compiled.parameters()) == list(model.parameters())  # shared, listed once
    compiled.eval()
    assert not model.training
    other = tiny_translation_model()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    compiled.load_state_dict(other.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
    with pytest.raises(TypeError, match="model must be a torch.nn.Module to compile, got str"):
        CompiledModel("classic")


def test_trainer_compiles_a_ddp_module_for_training_and_the_plain_one_for_evaluation(fake_compile):
    model = nn.Linear(2, 2)
    shared_training, shared_evaluation = compile_for_trainer(model, model, False, "vit")
    assert shared_training is shared_evaluation and fake_compile["dynamic"] == [None]
    ddp_like = nn.Sequential(model)  # stands for DistributedDataParallel(model)
    training, evaluation = compile_for_trainer(ddp_like, model, True, "classic")
    assert training.module is ddp_like and evaluation.module is model
    assert fake_compile["dynamic"][1:] == [True, True]  # translation: symbolic lengths from the first batch
