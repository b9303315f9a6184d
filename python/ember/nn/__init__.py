"""ember.nn: fused ops (``ember.nn.ops``), layers and losses."""
from . import ops  # noqa: F401
from .layers import (  # noqa: F401
    MLP,
    CausalSelfAttention,
    Embedding,
    GatedMLP,
    LayerNorm,
    Linear,
    Module,
    ModuleList,
    RmsNorm,
    Sequential,
    TransformerBlock,
    swiglu,
)
from .losses import cross_entropy, mse_loss  # noqa: F401
