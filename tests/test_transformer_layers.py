"""TransformerEncoderLayer / DecoderLayer / Encoder / Decoder / Transformer against torch's, weights copied:
outputs and gradients of every parameter and input, masks, causal flags, batch_first, norm_first, bias."""
import numpy as np
import pytest
import torch

import ember as em
from ember import nn

from conftest import TOL, WIDE

TDT = torch.float64


def _copy(m, t, device):
    m.load_state_dict({k: em.tensor(v.detach().numpy(), dtype=WIDE, device=device) for k, v in t.state_dict().items()})


def _np(t):
    return t.to_device("cpu").to_dtype(em.float64).numpy()


def _tol():
    r, a = TOL[WIDE.name]
    return (1e-9, 1e-10) if WIDE == em.float64 else (r * 100, a * 100 + 2e-5)


def _compare(m, t, ys, yts, inputs, tinputs):
    """Outputs, then the gradients of sum(y * up) for every parameter and input."""
    rtol, atol = _tol()
    np.testing.assert_allclose(_np(ys), yts.detach().numpy(), rtol=rtol, atol=atol)
    up = np.cos(np.arange(yts.numel()).reshape(tuple(yts.shape)))
    g = (ys * em.tensor(up, dtype=WIDE, device=ys.device)).sum().backward()
    (yts * torch.tensor(up)).sum().backward()
    for (n, p), (tn, tp) in zip(m.named_parameters(), t.named_parameters()):
        assert n == tn
        np.testing.assert_allclose(_np(g[p]), tp.grad.numpy(), rtol=rtol, atol=atol, err_msg=n)
    for v, tv in zip(inputs, tinputs):
        np.testing.assert_allclose(_np(g[v]), tv.grad.numpy(), rtol=rtol, atol=atol)


def _x(shape, seed, device):
    x = np.random.default_rng(seed).standard_normal(shape)
    return em.Var(em.tensor(x, dtype=WIDE, device=device)), torch.tensor(x, requires_grad=True)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation,bias", [("relu", True), ("gelu", False)])
def test_encoder_layer_like_torch(device, batch_first, norm_first, activation, bias):
    torch.manual_seed(0)
    kw = dict(dim_feedforward=24, dropout=0.0, activation=activation, batch_first=batch_first, norm_first=norm_first,
              bias=bias, layer_norm_eps=1e-6)
    t = torch.nn.TransformerEncoderLayer(16, 4, dtype=TDT, **kw)
    m = nn.TransformerEncoderLayer(16, 4, dtype=WIDE, device=device, **kw)
    assert list(m.state_dict()) == list(t.state_dict())
    _copy(m, t, device)
    shape = (2, 5, 16) if batch_first else (5, 2, 16)
    x, tx = _x(shape, 1, device)
    _compare(m, t, m(x), t(tx), [x], [tx])


@pytest.mark.parametrize("mask_kind", ["bool", "float", "causal_flag", "causal_mask_and_flag", "padding",
                                       "padding_float", "per_head"])
def test_encoder_layer_masks_like_torch(device, mask_kind):
    torch.manual_seed(1)
    t = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=TDT)
    m = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=WIDE, device=device)
    _copy(m, t, device)
    b, n = 3, 6
    x, tx = _x((b, n, 8), 2, device)
    rng = np.random.default_rng(3)
    causal = np.triu(np.ones((n, n), bool), 1)
    kw, tkw = {}, {}
    if mask_kind == "bool":
        mk = rng.random((n, n)) < 0.3
        np.fill_diagonal(mk, False)  # every query keeps a key (torch gives NaN for a fully masked one)
        kw["src_mask"], tkw["src_mask"] = em.tensor(mk, device=device), torch.tensor(mk)
    elif mask_kind == "float":
        mk = rng.standard_normal((n, n))
        kw["src_mask"], tkw["src_mask"] = em.tensor(mk, dtype=WIDE, device=device), torch.tensor(mk)
    elif mask_kind == "causal_flag":
        kw["is_causal"] = True
        tkw["src_mask"], tkw["is_causal"] = torch.tensor(causal), True
    elif mask_kind == "causal_mask_and_flag":
        kw["src_mask"], kw["is_causal"] = em.tensor(causal, device=device), True
        tkw["src_mask"], tkw["is_causal"] = torch.tensor(causal), True
    elif mask_kind in ("padding", "padding_float"):
        pad = np.zeros((b, n), bool)
        pad[0, 4:] = pad[2, 1:3] = True
        if mask_kind == "padding":
            kw["src_key_padding_mask"], tkw["src_key_padding_mask"] = em.tensor(pad, device=device), torch.tensor(pad)
        else:
            fp = np.where(pad, -1e9, 0.0)
            kw["src_key_padding_mask"] = em.tensor(fp, dtype=WIDE, device=device)
            tkw["src_key_padding_mask"] = torch.tensor(fp)
    else:
        mk = rng.random((b * 2, n, n)) < 0.3
        for i in range(b * 2):
            np.fill_diagonal(mk[i], False)
        kw["src_mask"], tkw["src_mask"] = em.tensor(mk, device=device), torch.tensor(mk)
    _compare(m, t, m(x, **kw), t(tx, **tkw), [x], [tx])


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # torch's, about mixing mask kinds
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_like_torch(device, batch_first, norm_first):
    torch.manual_seed(2)
    kw = dict(dim_feedforward=20, dropout=0.0, batch_first=batch_first, norm_first=norm_first)
    t = torch.nn.TransformerDecoderLayer(12, 3, dtype=TDT, **kw)
    m = nn.TransformerDecoderLayer(12, 3, dtype=WIDE, device=device, **kw)
    assert list(m.state_dict()) == list(t.state_dict())
    _copy(m, t, device)
    tshape, sshape = ((2, 4, 12), (2, 7, 12)) if batch_first else ((4, 2, 12), (7, 2, 12))
    x, tx = _x(tshape, 4, device)
    mem, tmem = _x(sshape, 5, device)
    causal = np.triu(np.ones((4, 4), bool), 1)
    pad = np.zeros((2, 7), bool)
    pad[1, 5:] = True
    mm = np.random.default_rng(6).standard_normal((4, 7))
    y = m(x, mem, tgt_mask=em.tensor(causal, device=device), memory_mask=em.tensor(mm, dtype=WIDE, device=device),
          memory_key_padding_mask=em.tensor(pad, device=device), tgt_is_causal=True)
    yt = t(tx, tmem, tgt_mask=torch.tensor(causal), memory_mask=torch.tensor(mm),
           memory_key_padding_mask=torch.tensor(pad), tgt_is_causal=True)
    _compare(m, t, y, yt, [x, mem], [tx, tmem])


def test_transformer_like_torch(device):
    torch.manual_seed(3)
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
              batch_first=True)
    t = torch.nn.Transformer(dtype=TDT, **kw)
    m = nn.Transformer(dtype=WIDE, device=device, **kw)
    assert list(m.state_dict()) == list(t.state_dict())
    assert [p.shape for p in m.parameters()] == [tuple(p.shape) for p in t.parameters()]
    _copy(m, t, device)
    src, tsrc = _x((2, 6, 8), 7, device)
    tgt, ttgt = _x((2, 5, 8), 8, device)
    tm = nn.Transformer.generate_square_subsequent_mask(5, device=device, dtype=WIDE)
    ttm = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=TDT)
    np.testing.assert_array_equal(_np(tm), ttm.numpy())
    pad = np.zeros((2, 6), bool)
    pad[0, 5] = True
    y = m(src, tgt, tgt_mask=tm, src_key_padding_mask=em.tensor(pad, device=device),
          memory_key_padding_mask=em.tensor(pad, device=device))
    yt = t(tsrc, ttgt, tgt_mask=ttm, src_key_padding_mask=torch.tensor(pad), memory_key_padding_mask=torch.tensor(pad))
    _compare(m, t, y, yt, [src, tgt], [tsrc, ttgt])


def test_transformer_init_and_stacks():
    em.manual_seed(0)
    m = nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32)
    w = m.encoder.layers[0].linear1.weight.numpy()
    bound = np.sqrt(6.0 / (16 + 32))  # xavier_uniform over every matrix, as torch
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    enc = nn.TransformerEncoder(layer, 3)
    assert [n for n, _ in enc.named_parameters()][:2] == ["layers.0.self_attn.in_proj_weight",
                                                          "layers.0.self_attn.in_proj_bias"]
    ps = [p for n, p in enc.named_parameters() if n.endswith("linear1.weight")]
    assert len({id(p) for p in ps}) == 3  # independent copies
    x = em.randn(4, 2, 8)
    assert enc.eval()(x).shape == (4, 2, 8)
    assert enc(x[:, 0]).shape == (4, 8)  # unbatched


def test_dropout_in_training_changes_output():
    em.manual_seed(0)
    m = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5, batch_first=True)
    x = em.randn(2, 5, 8)
    a, b = m(x), m(x)
    assert not np.allclose(a.numpy(), b.numpy())
    m.eval()
    np.testing.assert_array_equal(m(x).numpy(), m(x).numpy())


def test_errors():
    with pytest.raises(em.EmberValueError, match=r"\[TransformerEncoderLayer\] activation"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")
    with pytest.raises(em.ShapeError, match=r"\[TransformerDecoderLayer\]"):
        nn.TransformerDecoderLayer(8, 0)
    with pytest.raises(em.ShapeError, match=r"\[MultiHeadAttention\]"):
        nn.TransformerEncoderLayer(8, 3)
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    with pytest.raises(em.ShapeError, match=r"\[TransformerEncoderLayer\] expected src"):
        layer(em.ones(8))
    with pytest.raises(em.EmberTypeError, match=r"\[TransformerEncoderLayer\]"):
        layer([1.0])
    with pytest.raises(em.EmberValueError, match=r"\[TransformerEncoder\] num_layers"):
        nn.TransformerEncoder(layer, 0)
    with pytest.raises(em.EmberTypeError, match=r"\[TransformerDecoder\]"):
        nn.TransformerDecoder("layer", 2)
    m = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8)
    with pytest.raises(em.ShapeError, match=r"\[Transformer\] the batch"):
        m(em.ones(3, 2, 8), em.ones(3, 4, 8))
    with pytest.raises(em.ShapeError, match=r"\[Transformer\] the feature size"):
        m(em.ones(3, 2, 8), em.ones(3, 2, 6))
