"""The ONNX export's own mechanics on bare models: graphs of a model shared by two exports stay in eval mode, the
dynamic axes take other sizes than those traced (a graph with its batch baked in is refused), and the runtime wrapper
refuses a cache."""

from __future__ import annotations

import pytest
import torch

import zoo
from tasks.engine.export_graphs import batch_graph, seq2seq_graphs
from tasks.runs.onnx_export import export_graph
from tasks.runs.onnx_runtime import OnnxSeq2Seq, Session


def test_a_model_with_dropout_shared_by_the_encoder_and_step_graphs_exports_in_eval_mode(tmp_path):
    """The exporter restores the wrapper's training flag on its whole tree; with dropout on, the second graph's
    reference would be a random draw. Both graphs must check, and the model must come back in eval mode."""
    torch.manual_seed(0)
    model = zoo.create("classic", preset="tiny", dropout=0.3).eval()
    src, tgt = torch.randint(4, 50, (5, 9)), torch.randint(4, 50, (5, 7))
    src[0, -3:] = model.config.pad_id  # a padded source: the mask carries it
    for graph in seq2seq_graphs(model, src, tgt):
        check = export_graph(graph, tmp_path / f"{graph.name}.onnx")
        assert check["max_abs_diff"] <= check["limit"], graph.name
        assert not model.training
    runtime = OnnxSeq2Seq(Session(tmp_path / "encoder.onnx"), Session(tmp_path / "decoder_step.onnx"), model.config)
    longer = torch.randint(4, 50, (3, 13))  # other batch and source length than traced (2 and 2)
    memory, mask = runtime.encode(longer)
    with torch.no_grad():
        expected_memory, expected_mask = model.encode(longer)
        expected = model.decode(tgt[:3], expected_memory, expected_mask)[:, -1]
    torch.testing.assert_close(memory, expected_memory, atol=1e-4, rtol=1e-4)
    assert torch.equal(mask, expected_mask)
    torch.testing.assert_close(runtime.decode(tgt[:3], memory, mask)[:, -1], expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="takes no cache"):
        runtime.decode(tgt[:3], memory, mask, cache=object())


def test_an_image_graph_takes_another_batch_than_traced(tmp_path):
    model = zoo.create("vit", preset="tiny", image_size=32).eval()
    check = export_graph(batch_graph(model, "images", torch.randn(6, 3, 32, 32)), tmp_path / "model.onnx")
    assert check["examples"] == "images [6, 3, 32, 32]" and check["exporter"] == "torchscript"  # traced at batch 2
    images = torch.randn(11, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(Session(tmp_path / "model.onnx")(images)[0], model(images), atol=1e-4, rtol=1e-4)


class BakedBatch(torch.nn.Module):
    """A 3D segmenter's head that reads its batch as a Python int: the trace records the traced batch as a constant,
    so the exported graph only takes that batch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv3d(1, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 1, D, H, W) -> (B, 3·D·H·W)
        return self.conv(x).reshape(int(x.shape[0]), -1)


def test_a_graph_with_its_batch_baked_in_is_refused_even_from_two_examples(tmp_path):
    """Two patches, as a 3D run's export gives: tracing at batch 2 and checking at batch 2 would pass this graph."""
    torch.manual_seed(0)
    graph = batch_graph(BakedBatch().eval(), "patches", torch.randn(2, 1, 4, 6, 6))
    with pytest.raises(ValueError, match=r"did not export faithfully \(torchscript: onnxruntime's logits is "
                                         r"\[1, 864\], PyTorch's \[2, 432\] on patches \[2, 1, 4, 6, 6\] \(traced "
                                         r"on patches \[1, 1, 4, 6, 6\]: a dynamic axis was fixed"):
        export_graph(graph, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_a_dynamic_axis_of_one_example_is_refused(tmp_path):
    graph = batch_graph(BakedBatch().eval(), "patches", torch.randn(1, 1, 4, 6, 6))
    with pytest.raises(ValueError, match=r"size 1 along its dynamic axis 0 \(batch\).*at least 2 examples"):
        export_graph(graph, tmp_path / "model.onnx")


def test_a_missing_or_broken_graph_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing; export the run again"):
        Session(tmp_path / "absent.onnx")
    (tmp_path / "broken.onnx").write_bytes(b"not onnx")
    with pytest.raises(ValueError, match="broken.onnx is not a loadable ONNX graph"):
        Session(tmp_path / "broken.onnx")
