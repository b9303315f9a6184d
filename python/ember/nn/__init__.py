"""ember.nn: fused ops (``ember.nn.ops``), layers, convolutions, pooling, normalization, attention,
resampling, activation modules, losses and ``functional``."""
from . import functional, init, ops, utils
from .act_fns import elu, gelu, hardsigmoid, hardswish, leaky_relu, mish, softplus
from .act_more import (
    CELU,
    GLU,
    Hardshrink,
    Hardtanh,
    LogSigmoid,
    PReLU,
    ReLU6,
    Softmin,
    Softshrink,
    Softsign,
    Threshold,
    celu,
    glu,
    hardshrink,
    hardtanh,
    logsigmoid,
    prelu,
    relu6,
    softmin,
    softshrink,
    softsign,
    threshold,
)
from .activations import (
    ELU,
    GELU,
    Dropout,
    Dropout2d,
    Hardsigmoid,
    Hardswish,
    Identity,
    LeakyReLU,
    Mish,
    ReLU,
    Sigmoid,
    SiLU,
    Softplus,
    Tanh,
)
from .attention import KVCache, MultiHeadAttention, RoPE
from .containers import Flatten, ModuleDict, ParameterDict, ParameterList, Unflatten
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
from .instance_norm import InstanceNorm1d, InstanceNorm2d, instance_norm
from .interpolate import Upsample, interpolate
from .layers import (
    MLP,
    CausalSelfAttention,
    Embedding,
    GatedMLP,
    LayerNorm,
    Linear,
    ModuleList,
    RmsNorm,
    Sequential,
    TransformerBlock,
    swiglu,
)
from .losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .module import Module, Parameter
from .norm import BatchNorm1d, BatchNorm2d, GroupNorm, batch_norm, group_norm
from .pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)

__all__ = [
    "ELU", "GELU", "MLP", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AvgPool1d", "AvgPool2d", "BatchNorm1d",
    "BatchNorm2d", "CausalSelfAttention", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "Dropout",
    "Embedding", "GatedMLP", "GroupNorm", "Hardsigmoid", "Hardswish", "Identity", "KVCache", "LayerNorm",
    "LeakyReLU", "Linear", "MaxPool1d", "MaxPool2d", "Mish", "Module", "ModuleList", "MultiHeadAttention", "ReLU",
    "RmsNorm", "Sequential", "SiLU", "Sigmoid", "Softplus", "Tanh", "TransformerBlock", "Upsample",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "avg_pool1d", "avg_pool2d", "batch_norm",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "conv1d", "conv2d", "conv_transpose1d",
    "conv_transpose2d", "cross_entropy", "elu", "fold", "functional", "gelu", "group_norm", "hardsigmoid", "hardswish",
    "huber_loss", "interpolate", "kl_div", "l1_loss", "leaky_relu", "max_pool1d", "max_pool2d", "mish",
    "mse_loss", "nll_loss", "ops", "smooth_l1_loss", "softplus", "swiglu", "unfold",
]
__all__ += ["RoPE"]  # the rotary embedding layer (nn/attention.py)
__all__ += ["Flatten", "ModuleDict", "Parameter", "ParameterDict", "ParameterList", "Unflatten"]  # nn/module.py, nn/containers.py
__all__ += ["Dropout2d", "init"]
__all__ += ["CELU", "GLU", "Hardshrink", "Hardtanh", "LogSigmoid", "PReLU", "ReLU6", "Softmin", "Softshrink",
            "Softsign", "Threshold", "celu", "glu", "hardshrink", "hardtanh", "logsigmoid", "prelu", "relu6",
            "softmin", "softshrink", "softsign", "threshold"]  # nn/act_more.py
__all__ += ["InstanceNorm1d", "InstanceNorm2d", "instance_norm"]  # nn/instance_norm.py
from .transformer import (  # noqa: E402
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ += ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
            "TransformerEncoderLayer"]  # nn/transformer.py
__all__ += ["utils"]  # gradient clipping (nn/utils.py)
from .rnn import GRU, LSTM, RNN  # noqa: E402

__all__ += ["GRU", "LSTM", "RNN"]  # nn/rnn.py
