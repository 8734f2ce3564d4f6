"""The hand-derived parameter formula (core.accounting) counts RMSNorm's D and a GLU FFN's 3·D·F, so ``zoo params``
says "matches" for the rmsnorm and GLU configs as for the classic one."""

import pytest

from core.accounting import classic_parameters
from core.model import build_transformer
from core.parts import parameters_by_part


@pytest.mark.parametrize("overrides", [{}, {"norm": "rmsnorm"}, {"norm": "rmsnorm", "norm_first": True},
                                       {"activation": "geglu"}, {"activation": "swiglu", "d_ff": 43}])
def test_formula_matches_the_built_model(overrides):
    model = build_transformer("tiny", **overrides)
    assert classic_parameters(model.config) == parameters_by_part(model)
