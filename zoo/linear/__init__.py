"""Linear attention (Katharopoulos et al. 2020): the attention kernel swapped for φ(Q)(φ(K)ᵀV).

Importing this package registers the ``"linear"`` attention kernel (any config can then say
``kernel="linear"``) and the ``"linear"`` variant for translation, image classification and the language model.
"""

from core.attention import register_kernel
from zoo.linear.feature_maps import FEATURE_MAPS, EluFeatures, FavorFeatures, build_feature_map, orthogonal_gaussian
from zoo.linear.kernel import LinearAttention, causal_linear_attention, implied_weights, key_summary, linear_attention
from zoo.linear.variant import CAUSAL_CROSSOVER_N, CROSSOVER_N, LINEAR

register_kernel("linear", LinearAttention)

__all__ = [
    "CAUSAL_CROSSOVER_N",
    "CROSSOVER_N",
    "FEATURE_MAPS",
    "LINEAR",
    "EluFeatures",
    "FavorFeatures",
    "LinearAttention",
    "build_feature_map",
    "causal_linear_attention",
    "implied_weights",
    "key_summary",
    "linear_attention",
    "orthogonal_gaussian",
]
