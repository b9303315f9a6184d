"""MultiHeadAttention against torch's nn.MultiheadAttention: torch's parameter names (a torch state_dict
loads as it is), self- and cross-attention (kdim/vdim), bias, bool/float attn_mask and
key_padding_mask, is_causal, need_weights, batch_first both ways, unbatched input; values and the
gradients of the inputs and of every parameter; every float dtype; the KV cache against full causal
attention; finite differences; and bad input."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck
from nn_check import on

import ember as em

from conftest import FLOATS, TOL, WIDE, WIDE_NP, expect_error, npdt

E, H = 12, 3


def _dt(dt, device):
    # GPUs (ember's Metal kernels, also CUDA's) have no float64
    return em.float32 if dt is em.float64 and not em._C.device_supports(device.kind, device.index, dt.code) else dt


def _pair(rng, dt=em.float64, device=None, **kw):
    device = device or em.get_default_device()
    ref = torch.nn.MultiheadAttention(E, H, batch_first=kw.pop("batch_first", True), dtype=torch.float64, **kw)
    with torch.no_grad():  # torch starts the biases at 0: random ones test their wiring
        for name, p in ref.named_parameters():
            if "bias" in name:
                p.copy_(torch.tensor(rng.standard_normal(p.shape) * 0.3))
    mine = em.nn.MultiHeadAttention(E, H, dtype=_dt(dt, device), batch_first=ref.batch_first, device=device, **kw)
    mine.load_state_dict({k: em.tensor(v.detach().numpy().astype(npdt(_dt(dt, device))), device=device)
                          for k, v in ref.state_dict().items()})
    return mine, ref


def _run(mine, ref, q, k, v, rng, em_kw=None, torch_kw=None, dt=em.float64, device=None):
    """Forward both, compare outputs (and weights), then the gradients of inputs and parameters."""
    device = device or em.get_default_device()
    dt = _dt(dt, device)
    em_kw, torch_kw = em_kw or {}, torch_kw or {}
    ref.zero_grad()  # torch accumulates into .grad across calls; each ember backward is a new store
    ins = [em.Var(em.tensor(a.astype(npdt(dt)), device=device)) for a in (q, k, v)]
    tins = [torch.tensor(a.astype(npdt(dt)).astype(np.float64), requires_grad=True) for a in (q, k, v)]
    out, w = mine(*ins, **em_kw)
    tout, tw = ref(*tins, **torch_kw)
    rtol, atol = TOL[dt.name]
    close = dict(rtol=rtol * 50, atol=atol * 100)
    np.testing.assert_allclose(out.numpy().astype(np.float64), tout.detach().numpy(), **close)
    if em_kw.get("need_weights"):
        np.testing.assert_allclose(w.numpy().astype(np.float64), tw.detach().numpy(), **close)
    g = rng.uniform(0.5, 1.5, size=tout.shape)
    assert out.device == device
    grads = (out * em.tensor(g.astype(npdt(dt)), device=device)).sum().backward()
    (tout * torch.tensor(g)).sum().backward()
    for i, (a, b) in enumerate(zip(ins, tins)):
        np.testing.assert_allclose(grads[a].numpy().astype(np.float64), b.grad.numpy(), err_msg=f"input {i}", **close)
    tparams = dict(ref.named_parameters())
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(grads[p].numpy().astype(np.float64), tparams[name].grad.numpy(), err_msg=name,
                                   **close)


def test_parameter_names_are_torchs():
    for kw in (dict(), dict(bias=False), dict(kdim=5, vdim=7)):
        ref = torch.nn.MultiheadAttention(E, H, batch_first=True, **kw)
        mine = em.nn.MultiHeadAttention(E, H, **kw)
        assert [n for n, _ in mine.named_parameters()] == [n for n, _ in ref.named_parameters()]
        assert {n: p.shape for n, p in mine.named_parameters()} == {n: tuple(p.shape) for n, p in
                                                                     ref.named_parameters()}


def test_self_attention_matches_torch(rng, device):
    mine, ref = _pair(rng, device=device)
    x = rng.standard_normal((2, 5, E))
    _run(mine, ref, x, x, x, rng, device=device)
    _run(mine, ref, x, x, x, rng, dict(need_weights=True), dict(need_weights=True), device=device)
    _run(mine, ref, x, x, x, rng, dict(need_weights=True, average_attn_weights=False),
         dict(need_weights=True, average_attn_weights=False), device=device)


def test_cross_attention_kdim_vdim_no_bias(rng):
    mine, ref = _pair(rng, kdim=5, vdim=7, bias=False)
    q, k, v = rng.standard_normal((2, 4, E)), rng.standard_normal((2, 6, 5)), rng.standard_normal((2, 6, 7))
    _run(mine, ref, q, k, v, rng)
    mine, ref = _pair(rng)  # packed weights, distinct key and value tensors
    _run(mine, ref, q, rng.standard_normal((2, 6, E)), rng.standard_normal((2, 6, E)), rng)


@pytest.mark.parametrize("mask", ["bool2d", "bool3d", "float2d", "float3d"])
@pytest.mark.parametrize("padding", [None, "bool", "float"])
def test_masks_match_torch(mask, padding, rng, device):
    mine, ref = _pair(rng, device=device)
    b, lq, lk = 2, 4, 6
    q, kv = rng.standard_normal((b, lq, E)), rng.standard_normal((b, lk, E))
    shape = (lq, lk) if mask.endswith("2d") else (b * H, lq, lk)
    if mask.startswith("bool"):
        m = rng.random(shape) < 0.3
        m[..., 0] = False  # every query keeps a key: torch gives NaN for a fully masked row, ember 0
    else:
        m = rng.standard_normal(shape)
    kpm = None
    if padding == "bool":
        kpm = np.zeros((b, lk), bool)
        kpm[1, 4:] = True
    elif padding == "float":
        kpm = rng.standard_normal((b, lk))
    em_kw = dict(attn_mask=on(device, m), key_padding_mask=None if kpm is None else on(device, kpm))
    torch_kw = dict(attn_mask=torch.tensor(m), key_padding_mask=None if kpm is None else torch.tensor(kpm))
    # torch wants both masks of one kind (ember takes any mix): give it the bool one as -inf floats.
    if padding == "float" and mask.startswith("bool"):
        torch_kw["attn_mask"] = torch.zeros(shape, dtype=torch.float64).masked_fill(torch.tensor(m), float("-inf"))
    if padding == "bool" and mask.startswith("float"):
        pad = torch.zeros((b, lk), dtype=torch.float64).masked_fill(torch.tensor(kpm), float("-inf"))
        torch_kw["key_padding_mask"] = pad
    _run(mine, ref, q, kv, kv, rng, em_kw, torch_kw, device=device)


def test_is_causal_matches_torch_with_and_without_padding(rng, device):
    mine, ref = _pair(rng, device=device)
    x = rng.standard_normal((2, 5, E))
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    _run(mine, ref, x, x, x, rng, dict(is_causal=True), dict(attn_mask=causal, is_causal=True), device=device)
    kpm = np.zeros((2, 5), bool)
    kpm[0, 3:] = True
    _run(mine, ref, x, x, x, rng, dict(is_causal=True, key_padding_mask=kpm),
         dict(attn_mask=causal, key_padding_mask=torch.tensor(kpm)), device=device)


def test_batch_first_false_and_unbatched(rng):
    mine, ref = _pair(rng, batch_first=False)
    x = rng.standard_normal((5, 2, E))  # (L, B, E)
    _run(mine, ref, x, x, x, rng)
    mine, ref = _pair(rng)
    x = rng.standard_normal((5, E))
    _run(mine, ref, x, x, x, rng, dict(need_weights=True), dict(need_weights=True))


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_every_dtype(dt, rng, device):
    mine, ref = _pair(rng, dt=dt, device=device)
    x = rng.standard_normal((2, 4, E))
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
    if _dt(dt, device) is not em.float64:  # torch in float64 on the parameters rounded as ember holds them
        with torch.no_grad():
            for name, p in ref.named_parameters():
                p.copy_(torch.tensor(dict(mine.named_parameters())[name].numpy().astype(np.float64)))
    _run(mine, ref, x, x, x, rng, dict(is_causal=True), dict(attn_mask=causal), dt=dt, device=device)


def test_kv_cache_decoding_equals_full_causal_attention(rng, device):
    dt = _dt(em.float64, device)
    tol = dict(rtol=1e-12, atol=1e-12) if dt is em.float64 else dict(rtol=1e-5, atol=1e-6)
    mine = em.nn.MultiHeadAttention(E, H, dtype=dt, device=device)
    x = on(device, rng.standard_normal((2, 7, E)))
    full, _ = mine(x, is_causal=True)
    cache = em.nn.KVCache()
    prompt, _ = mine(x[:, :3], is_causal=True, cache=cache)  # a prompt chunk, then one token at a time
    steps = [prompt.numpy()]
    for i in range(3, 7):
        out, _ = mine(x[:, i : i + 1], is_causal=True, cache=cache)
        steps.append(out.numpy())
    assert len(cache) == cache.seq_len == 7 and cache.k.shape == (2, H, 7, E // H)
    np.testing.assert_allclose(np.concatenate(steps, 1), full.numpy(), **tol)
    cache.reset()
    assert len(cache) == 0
    # A padding mask over every cached key works with the cache too.
    kpm = np.zeros((2, 7), bool)
    kpm[1, 1] = True
    full, _ = mine(x, is_causal=True, key_padding_mask=on(device, kpm))
    mine(x[:, :6], is_causal=True, cache=cache, key_padding_mask=on(device, kpm[:, :6]))
    last, _ = mine(x[:, 6:], is_causal=True, cache=cache, key_padding_mask=on(device, kpm))
    np.testing.assert_allclose(last.numpy(), full.numpy()[:, 6:], **tol)


def test_attention_gradcheck(rng):
    # the modules are built where fn runs, from fixed weights: devcheck runs fn on the CPU and on the device
    def module(**kw):
        sd = {k: v.numpy() for k, v in em.nn.MultiHeadAttention(6, 2, dtype=WIDE, **kw).state_dict().items()}

        def build(x):
            mod = em.nn.MultiHeadAttention(6, 2, dtype=x.dtype, device=x.device, **kw)
            mod.load_state_dict({k: em.tensor(v, device=x.device) for k, v in sd.items()})
            return mod
        return build

    q, k, v = (em.tensor(rng.standard_normal(s).astype(WIDE_NP)) for s in ((1, 3, 6), (1, 4, 4), (1, 4, 5)))
    m = rng.standard_normal((3, 4)).astype(WIDE_NP)
    cross, selfa = module(kdim=4, vdim=5), module()
    assert gradcheck(lambda a, b, c: cross(a)(a, b, c, attn_mask=em.tensor(m).to_dtype(a.dtype))[0], [q, k, v])
    assert gradcheck(lambda a: selfa(a)(a, is_causal=True)[0], [q])


def test_dropout_only_while_training(rng):
    mine = em.nn.MultiHeadAttention(E, H, dropout=0.5)
    x = em.tensor(rng.standard_normal((2, 5, E)).astype(np.float32))
    mine.eval()
    a, b = mine(x)[0].numpy(), mine(x)[0].numpy()
    np.testing.assert_array_equal(a, b)
    mine.train()
    em.manual_seed(1)
    c = mine(x)[0].numpy()
    assert not np.allclose(a, c)


def test_attention_errors():
    mha = em.nn.MultiHeadAttention(E, H)
    x = em.randn(2, 5, E)
    op = "MultiHeadAttention"
    expect_error(lambda: em.nn.MultiHeadAttention(10, 3), op, em.ShapeError)
    expect_error(lambda: em.nn.MultiHeadAttention(E, H, dropout=1.0), op, em.EmberValueError)
    expect_error(lambda: mha(em.randn(2, 5, E + 1)), op, em.ShapeError)
    expect_error(lambda: mha(x, em.randn(2, 4, E), em.randn(2, 5, E)), op, em.ShapeError)
    expect_error(lambda: mha(x.to_dtype(em.float16)), op, em.DTypeError)
    expect_error(lambda: mha(x.numpy()), op, em.EmberTypeError)
    expect_error(lambda: mha(x, attn_mask=em.zeros(5, 4)), op, em.ShapeError)
    expect_error(lambda: mha(x, key_padding_mask=em.zeros(2, 4)), op, em.ShapeError)
    expect_error(lambda: mha(x, attn_mask=em.zeros(5, 5, dtype="int64")), op, em.DTypeError)
    expect_error(lambda: mha(x, cache={}), op, em.EmberTypeError)
    cache = em.nn.KVCache(max_len=6)
    mha(x, cache=cache)
    expect_error(lambda: mha(x[:, :2], cache=cache), "KVCache", em.ShapeError)
    expect_error(lambda: mha(x[:1, :1], cache=cache), "KVCache", em.ShapeError)
