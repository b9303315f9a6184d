"""ember.nn: fused ops (``ember.nn.ops``), layers and losses."""
from . import ops
from .conv import (
    Conv1d,
    Conv2d,
    ConvTranspose1d,
    ConvTranspose2d,
    conv1d,
    conv2d,
    conv_transpose1d,
    conv_transpose2d,
    fold,
    unfold,
)
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
    "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "conv1d", "conv2d", "conv_transpose1d",
    "conv_transpose2d", "fold", "unfold",
    "MLP", "CausalSelfAttention", "Embedding", "GatedMLP", "LayerNorm", "Linear", "Module", "ModuleList",
    "RmsNorm", "Sequential", "TransformerBlock", "cross_entropy", "mse_loss", "ops", "swiglu",
]
