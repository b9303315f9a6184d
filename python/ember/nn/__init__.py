"""ember.nn: fused ops (``ember.nn.ops``), layers and losses."""
from . import ops
from .layers import (
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
from .losses import cross_entropy, mse_loss

__all__ = [
    "MLP", "CausalSelfAttention", "Embedding", "GatedMLP", "LayerNorm", "Linear", "Module", "ModuleList",
    "RmsNorm", "Sequential", "TransformerBlock", "cross_entropy", "mse_loss", "ops", "swiglu",
]
