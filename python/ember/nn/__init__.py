"""ember.nn: fused ops (``ember.nn.ops``), layers, activation modules, losses and ``functional``."""
from . import (
    functional,  # noqa: F401, E402, I001
    ops,  # noqa: F401
)
from .activations import GELU, Dropout, Identity, ReLU, Sigmoid, SiLU, Tanh  # noqa: F401, E402, I001
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
