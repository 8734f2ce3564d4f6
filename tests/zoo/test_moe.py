"""Mixture of experts: routing, capacity and drops, auxiliary losses, gradients, errors, training."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import zoo
import zoo.moe  # registers the "moe" FFN type and variant
from core.ffn import PositionwiseFFN, build_ffn
from core.layers import ResidualLayer
from zoo.moe import MoEFFN, TopKRouter, active_parameters, auxiliary_loss, moe_layers, routing_stats

D = 8


@torch.no_grad()
def point_router(moe: MoEFFN, logits_per_unit: list[list[float]]) -> None:
    """Router weights such that input unit vector e_i gets logits ``logits_per_unit[i]``."""
    weight = torch.zeros(moe.n_experts, D)
    for i, logits in enumerate(logits_per_unit):
        weight[:, i] = torch.tensor(logits)
    moe.router.proj.weight.copy_(weight)


def unit_tokens(units: list[int]) -> torch.Tensor:
    """A ``(1, T, D)`` batch whose t-th token is the unit vector e_{units[t]}."""
    return F.one_hot(torch.tensor(units), D).float().unsqueeze(0)


def dense_reference(moe: MoEFFN, x: torch.Tensor) -> torch.Tensor:
    """The definition, token by token: Σ over the k chosen experts of gate · expert(token)."""
    tokens = x.reshape(-1, D)
    routing = moe.router(tokens)
    rows = [sum(g * moe.experts[e](t) for g, e in zip(gates, experts.tolist()))
            for t, gates, experts in zip(tokens, routing.gates, routing.experts)]
    return torch.stack(rows).view(x.shape)


# ------------------------------------------------------------------------------------ equivalences


@pytest.mark.parametrize("dropless, capacity_factor", [(True, 1.25), (False, 1.0)])
def test_one_expert_top1_equals_the_dense_ffn(dropless, capacity_factor):
    moe = MoEFFN(D, 16, n_experts=1, k=1, capacity_factor=capacity_factor, dropless=dropless)
    dense = PositionwiseFFN(D, 16)
    dense.load_state_dict(moe.experts[0].state_dict())
    x = torch.randn(3, 5, D)
    assert_close(moe(x), dense(x))
    assert routing_stats(moe)[""]["dropped"] == 0.0


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_dispatch_equals_the_per_token_definition(k, training):
    moe = MoEFFN(D, 16, n_experts=4, k=k, dropless=True).train(training)
    x = torch.randn(2, 7, D)
    assert_close(moe(x), dense_reference(moe, x))


def test_top2_gates_sum_to_one_and_top1_gate_is_the_probability():
    x = torch.randn(20, D)
    routing = TopKRouter(D, 5, k=2)(x)
    assert_close(routing.gates.sum(-1), torch.ones(20))
    assert (routing.experts[:, 0] != routing.experts[:, 1]).all()
    assert (routing.probs.gather(1, routing.experts).diff(dim=1) <= 0).all()  # best first
    switch = TopKRouter(D, 5, k=1)
    switch.load_state_dict(TopKRouter(D, 5, k=2).state_dict())
    top1 = switch(x)
    assert_close(top1.gates[:, 0], top1.probs.max(-1).values)  # not renormalised: the router learns from it


def test_router_logits_are_float32_under_bf16_autocast():
    router, x = TopKRouter(D, 4, k=2), torch.randn(6, D)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        routing = router(x)
        assert F.linear(x, router.proj.weight).dtype == torch.bfloat16  # what autocast would have done
        out = MoEFFN(D, 16, 4, 2)(x.unsqueeze(0))
    assert routing.logits.dtype == routing.probs.dtype == routing.gates.dtype == torch.float32
    assert_close(routing.logits, x @ router.proj.weight.t())
    assert out.shape == (1, 6, D)


def test_jitter_only_in_training():
    router, x = TopKRouter(D, 4, k=1, jitter=0.1), torch.randn(6, D)
    assert not torch.equal(router(x).logits, router(x).logits)
    router.eval()
    assert_close(router(x).logits, x @ router.proj.weight.t())


# ---------------------------------------------------------------------------- auxiliary losses


def test_balancing_loss_is_one_when_balanced_and_E_when_collapsed():
    moe = MoEFFN(D, 16, n_experts=4, k=1, dropless=True)
    point_router(moe, [[10.0 if e == i else 0.0 for e in range(4)] for i in range(4)])  # e_i -> expert i
    moe(unit_tokens([0, 1, 2, 3] * 3))
    assert routing_stats(moe)[""]["load"] == [0.25] * 4
    assert_close(moe.balance_loss, torch.tensor(1.0))
    point_router(moe, [[100.0, 0.0, 0.0, 0.0]])
    moe(unit_tokens([0] * 12))
    assert routing_stats(moe)[""]["load"] == [1.0, 0.0, 0.0, 0.0]
    assert_close(moe.balance_loss, torch.tensor(4.0))


def test_z_loss_is_mean_squared_logsumexp():
    moe = MoEFFN(D, 16, n_experts=4, k=2)
    point_router(moe, [[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]])
    moe(unit_tokens([0, 1]))
    expected = (torch.tensor([1.0, 2.0, 3.0, 4.0]).logsumexp(0) ** 2 + math.log(4) ** 2) / 2
    assert_close(moe.z_loss, expected)
    assert_close(auxiliary_loss(moe, balance_weight=0.5, z_weight=2.0), 0.5 * moe.balance_loss + 2.0 * expected)


# ------------------------------------------------------------------------------ capacity and drops


@pytest.mark.parametrize("tokens, capacity_factor, capacity", [(10, 1.0, 3), (16, 1.25, 5), (7, 2.0, 4), (5, 0.5, 1)])
def test_drops_follow_the_capacity_formula_first_come_first_served(tokens, capacity_factor, capacity):
    # one sequence, in training; all tokens prefer expert 0 of 4: capacity = ceil(capacity_factor · k · N / E), k = 1
    moe = MoEFFN(D, 16, n_experts=4, k=1, capacity_factor=capacity_factor).train()
    point_router(moe, [[5.0, 0.0, 0.0, 0.0]])
    assert moe.capacity(tokens) == capacity
    x = unit_tokens([0] * tokens)
    out = moe(x)[0]  # (T, D)
    assert routing_stats(moe)[""]["dropped"] == pytest.approx((tokens - capacity) / tokens)
    assert torch.equal(out[capacity:], torch.zeros(tokens - capacity, D))  # dropped: exactly 0
    assert (out[:capacity].abs().sum(-1) > 0).all()  # the earliest tokens were served
    residual = ResidualLayer(D, dropout=0.0, norm_first=True)  # Pre-LN: x + FFN(LN(x))
    assert torch.equal(residual.residual(x, nn.LayerNorm(D), moe)[0, capacity:], x[0, capacity:])


def test_capacity_is_exact_ceil_of_the_formula():
    assert MoEFFN(D, 16, n_experts=4, k=2, capacity_factor=1.1).capacity(100) == 55  # float: 55.00000000000001
    assert MoEFFN(D, 16, n_experts=8, k=2).capacity(8192) == 2560


def test_training_serves_earlier_positions_first_then_choices():
    # tokens 0-1 prefer experts (1, 0), tokens 2-3 prefer (0, 1); capacity = ceil(1 · 2 · 4 / 4) = 2. The
    # order is position first, then choice: tokens 0-1 take both slots of experts 0 and 1, and the later
    # tokens 2-3 are dropped. (The old order, every first choice of the batch before any second choice, let
    # tokens 2-3 take the slots of the earlier tokens' second choices: a later token changed an earlier
    # token's output, a leak of the future under teacher forcing.)
    moe = MoEFFN(D, 16, n_experts=4, k=2, capacity_factor=1.0)
    point_router(moe, [[1.0, 2.0, -5.0, -5.0], [2.0, 1.0, -5.0, -5.0]])
    x = unit_tokens([0, 0, 1, 1])
    out = moe(x)[0]
    assert_close(out[:2], dense_reference(moe, x)[0, :2])
    assert torch.equal(out[2:], torch.zeros(2, D))
    assert routing_stats(moe)[""]["dropped"] == 0.5


def test_training_capacity_is_per_sequence():
    # Each sequence gets its own capacity: a sequence whose tokens all prefer expert 0 cannot take the
    # slots of another sequence's tokens, however early it comes in the batch.
    moe = MoEFFN(D, 16, n_experts=4, k=1, capacity_factor=1.0)  # capacity ceil(1 · 1 · 4 / 4) = 1 per sequence
    point_router(moe, [[5.0, 0.0, 0.0, 0.0], [0.0, 5.0, 0.0, 0.0]])
    greedy = unit_tokens([0, 0, 0, 0])[0]  # all prefer expert 0
    other = unit_tokens([0, 1, 1, 1])[0]
    alone = moe(other.unsqueeze(0))[0]
    batch = moe(torch.stack([greedy, other]))  # (2, 4, D)
    assert_close(batch[1], alone)
    assert torch.equal(batch[0, 1:], torch.zeros(3, D))  # the greedy sequence drops its own later tokens
    assert (batch[1, :2].abs().sum(-1) > 0).all()  # the other sequence's expert-0 token was served
    assert routing_stats(moe)[""]["dropped"] == pytest.approx(5 / 8)


@pytest.mark.parametrize("training", [True, False])
def test_padding_is_never_routed_and_takes_no_capacity(training):
    # Left-padded (the hardest case for position order): pads come first, all prefer expert 0
    moe = MoEFFN(D, 16, n_experts=4, k=1, capacity_factor=1.0).train(training)  # capacity 2 of N = 8
    point_router(moe, [[5.0, 0.0, 0.0, 0.0], [5.0, 1.0, 0.0, 0.0]])
    x = unit_tokens([0] * 6 + [1, 1])
    mask = torch.tensor([[False] * 6 + [True] * 2])
    out = moe(x, token_mask=mask)[0]
    assert torch.equal(out[:6], torch.zeros(6, D))  # padding: not routed, output 0
    assert_close(out[6:], dense_reference(moe, x)[0, 6:])  # both real tokens served
    stats = routing_stats(moe)[""]
    assert stats["dropped"] == 0.0 and stats["load"] == [1.0, 0.0, 0.0, 0.0]  # over the real tokens only
    real_only = moe(x[:, 6:]).detach(), moe.balance_loss.detach(), moe.z_loss.detach()
    moe(x, token_mask=mask)
    assert_close((moe.balance_loss, moe.z_loss), real_only[1:])  # the pads count in no loss
    garbage = x.clone()
    garbage[0, :6] = torch.randn(6, D)
    assert torch.equal(moe(garbage, token_mask=mask)[0, 6:], out[6:])  # what padding holds does not matter


def test_evaluation_is_dropless_and_a_token_depends_on_itself_alone():
    moe = MoEFFN(D, 16, n_experts=4, k=2, capacity_factor=0.5).eval()
    point_router(moe, [[5.0, 1.0, 0.0, 0.0]])
    x = unit_tokens([0] * 9)
    assert_close(moe(x), dense_reference(moe, x))
    assert routing_stats(moe)[""]["dropped"] == 0.0
    # to the last bit, whatever the other tokens are (how many share its experts, how many there are)
    x = torch.randn(2, 11, D)
    reference = moe(x[:1, :1])[0, 0]
    for other in (x, x[:, :5], torch.cat([x[:1, :1], torch.randn(1, 30, D)], dim=1)):
        assert torch.equal(moe(other)[0, 0], reference)


@pytest.mark.parametrize("d_model", [D, 64])
def test_a_random_router_gives_a_token_the_same_logits_and_output_in_any_call(d_model):
    # A dense random router, not point_router's one-hot columns (whose dot products have a single non-zero
    # term, exact in any summation order): with one (T, D) @ (D, E) matmul, a 1-token and a 37-token call
    # differed by up to 9.5e-7 (D = 8) and 7.6e-6 (D = 64) in the logits, 3e-7 in the output; each token's own
    # product makes them equal.
    moe = MoEFFN(d_model, 2 * d_model, n_experts=8, k=2).eval()
    with torch.no_grad():
        moe.router.proj.weight.copy_(torch.randn(8, d_model))
    x = torch.randn(1, 37, d_model)
    logits, out = moe.router(x[0]).logits, moe(x)[0]
    for t in (0, 17, 36):
        assert torch.equal(moe.router(x[0, t:t + 1]).logits[0], logits[t])
        assert torch.equal(moe(x[:, t:t + 1])[0, 0], out[t])


def test_token_mask_must_match_the_input():
    moe = MoEFFN(D, 16, 4, 2)
    with pytest.raises(TypeError, match="token_mask must be a bool tensor"):
        moe(torch.randn(2, 3, D), token_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"token_mask must have the input's shape without D, \(2, 3\), got \(2, 4\)"):
        moe(torch.randn(2, 3, D), token_mask=torch.ones(2, 4, dtype=torch.bool))


def test_dropless_drops_nothing():
    moe = MoEFFN(D, 16, n_experts=4, k=2, capacity_factor=0.5, dropless=True).eval()
    point_router(moe, [[5.0, 1.0, 0.0, 0.0]])
    x = unit_tokens([0] * 9)
    out = moe(x)
    assert routing_stats(moe)[""]["dropped"] == 0.0
    assert routing_stats(moe)[""]["load"] == [0.5, 0.5, 0.0, 0.0]
    assert_close(out, dense_reference(moe, x))


# ------------------------------------------------------------------------------------ gradients


def test_every_parameter_gets_a_gradient_from_task_plus_auxiliary_loss():
    torch.manual_seed(0)
    model = zoo.create("moe", preset="tiny", ffn_options={"n_experts": 4, "dropless": True})
    src, tgt = torch.randint(3, 64, (8, 10)), torch.randint(3, 64, (8, 11))
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten()) + auxiliary_loss(model)
    loss.backward()
    assert all(min(stats["load"]) > 0 for stats in routing_stats(model).values())  # every expert had tokens
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_idle_experts_get_zero_gradients_not_none():
    moe = MoEFFN(D, 16, n_experts=4, k=1)
    point_router(moe, [[5.0, 0.0, 0.0, 0.0]])
    (moe(unit_tokens([0] * 4)).sum() + auxiliary_loss(moe)).backward()
    assert moe.router.proj.weight.grad.abs().sum() > 0
    for expert in moe.experts[1:]:
        assert all(p.grad is not None and not p.grad.any() for p in expert.parameters())


# ---------------------------------------------------------------------------------- bad configs


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_experts=4, k=5), r"k=5 experts per token is more than n_experts=4"),
        (dict(n_experts=4, k=0), r"k must be > 0, got 0"),
        (dict(n_experts=0, k=1), r"n_experts must be > 0, got 0"),
        (dict(capacity_factor=0.0), r"capacity_factor must be a number > 0.*got 0.0.*dropless=True"),
        (dict(capacity_factor=-1), r"capacity_factor must be a number > 0"),
        (dict(activation="gleu"), r"unknown activation 'gleu'. Did you mean 'gelu'"),
        (dict(jitter=1.0), r"jitter must be a float in \[0, 1\)"),
    ],
)
def test_bad_configs_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MoEFFN(D, 16, **kwargs)


def test_bad_ffn_options_and_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown ffn option of 'moe' 'n_expert'. Did you mean 'n_experts'"):
        build_ffn("moe", D, 16, layer=1, n_expert=4)
    with pytest.raises(ValueError, match="every must be > 0"):
        build_ffn("moe", D, 16, layer=1, every=0)
    with pytest.raises(ValueError, match=r"must be \(\.\.\., d_model=8\), got \(2, 3, 4\)"):
        MoEFFN(D, 16, 4, 2)(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="have not run a forward yet"):
        auxiliary_loss(MoEFFN(D, 16, 4, 2))


# ---------------------------------------------------------------------------- the "moe" variant


def test_factory_puts_experts_in_every_other_layer():
    kinds = [type(build_ffn("moe", D, 16, layer=i)) for i in range(4)]
    assert kinds == [PositionwiseFFN, MoEFFN, PositionwiseFFN, MoEFFN]
    assert all(isinstance(build_ffn("moe", D, 16, layer=i, every=1), MoEFFN) for i in range(3))
    moe = build_ffn("moe", D, 16, layer=1)
    assert (moe.n_experts, moe.k, moe.capacity_factor, moe.dropless) == (8, 2, 1.25, False)


def test_active_parameters_count_the_router_and_k_experts():
    model = zoo.create("moe", preset="tiny")
    layers = moe_layers(model)
    assert list(layers) == ["encoder.layers.1.ffn", "decoder.layers.1.ffn"]
    d, d_ff, E, k = 32, 64, 8, 2
    expert = 2 * d * d_ff + d_ff + d
    total = sum(p.numel() for p in model.parameters())
    assert active_parameters(model) == total - 2 * (E - k) * expert
    classic = zoo.create("classic", preset="tiny")
    assert active_parameters(classic) == sum(p.numel() for p in classic.parameters())
    assert total == sum(p.numel() for p in classic.parameters()) + 2 * ((E - 1) * expert + E * d)


def test_tiny_moe_transformer_trains_with_the_auxiliary_loss():
    torch.manual_seed(0)
    model = zoo.create("moe", preset="tiny", src_vocab=16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    src = torch.randint(3, 16, (16, 6))
    tgt = torch.cat([torch.ones(16, 1, dtype=torch.long), src, torch.full((16, 1), 2)], dim=1)
    losses = []
    for _ in range(15):
        task = F.cross_entropy(model(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten())
        loss = task + auxiliary_loss(model)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(task.item())
    assert losses[-1] < 0.7 * losses[0]
    stats = routing_stats(model)
    assert set(stats) == {"encoder.layers.1.ffn", "decoder.layers.1.ffn"}
    for layer in stats.values():
        assert sum(layer["load"]) == pytest.approx(1.0)
        assert 0.0 <= layer["entropy"] <= math.log(8) + 1e-6
        assert 0.0 <= layer["dropped"] < 1.0


def test_auxiliary_loss_of_a_model_without_experts_is_zero():
    classic = zoo.create("classic", preset="tiny")
    assert auxiliary_loss(classic).item() == 0.0 and routing_stats(classic) == {}


def test_an_empty_batch_gives_an_empty_output_and_zero_losses():
    moe = MoEFFN(D, 16, n_experts=4, k=2)
    assert moe(torch.randn(2, 0, D)).shape == (2, 0, D)
    assert auxiliary_loss(moe).item() == 0.0 and routing_stats(moe)[""]["dropped"] == 0.0
