"""ember.nn: fused ops (``ember.nn.ops``), layers, convolutions, activation modules, losses and ``functional``."""
from . import functional, ops
from .activations import GELU, Dropout, Identity, ReLU, Sigmoid, SiLU, Tanh
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
    "GELU", "MLP", "CausalSelfAttention", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "Dropout",
    "Embedding", "GatedMLP", "Identity", "LayerNorm", "Linear", "Module", "ModuleList", "ReLU", "RmsNorm",
    "Sequential", "SiLU", "Sigmoid", "Tanh", "TransformerBlock", "conv1d", "conv2d", "conv_transpose1d",
    "conv_transpose2d", "cross_entropy", "fold", "functional", "mse_loss", "ops", "swiglu", "unfold",
]
