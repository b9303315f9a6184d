"""Tests for em.nn layers and losses against torch; Module naming, state_dict and train/eval."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ember as em
from ember import nn


def _t(x):
    return torch.from_numpy(x.numpy())


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def _copy_into_torch(module: nn.Module, tmod: torch.nn.Module):
    """Copies ember parameters into a torch module with the same parameter names."""
    tparams = dict(tmod.named_parameters())
    assert set(tparams) == {n for n, _ in module.named_parameters()}
    with torch.no_grad():
        for name, p in module.named_parameters():
            tparams[name].copy_(_t(p))


# ----------------------------------------------------------------------------- layers vs torch
def test_linear_matches_torch_and_init():
    em.manual_seed(0)
    lin = nn.Linear(64, 5)
    assert lin.weight.shape == (5, 64) and lin.bias.shape == (5,)
    assert lin.weight.is_variable and lin.bias.is_variable
    bound = 1 / math.sqrt(64)
    w = lin.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound and abs(w.mean()) < 0.2 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.2 * bound  # U(-b, b), like torch's kaiming_uniform(a=sqrt(5))
    tl = torch.nn.Linear(64, 5)
    _copy_into_torch(lin, tl)
    x = np.random.default_rng(0).standard_normal((2, 3, 64)).astype(np.float32)
    _close(lin(em.tensor(x)), tl(torch.from_numpy(x)))
    nb = nn.Linear(4, 3, bias=False)
    assert nb.bias is None and [n for n, _ in nb.named_parameters()] == ["weight"]
    _close(nb(em.tensor(x[..., :4]).t()[0].t()), torch.from_numpy(x[..., :4]).mT[0].mT @ _t(nb.weight).T)


def test_embedding_norms_match_torch():
    em.manual_seed(1)
    emb = nn.Embedding(10, 6)
    ids = np.array([[1, 9, 0], [3, 3, 7]])
    temb = torch.nn.Embedding(10, 6)
    _copy_into_torch(emb, temb)
    _close(emb(em.tensor(ids)), temb(torch.from_numpy(ids)))
    assert 0.5 < emb.weight.numpy().std() < 1.5  # N(0, 1) like torch

    x = np.random.default_rng(2).standard_normal((3, 4, 6)).astype(np.float32)
    rms, ln = nn.RmsNorm(6), nn.LayerNorm(6, eps=1e-3)
    assert rms.weight.tolist() == [1.0] * 6 and ln.bias.tolist() == [0.0] * 6
    rms.weight.set(em.tensor(np.linspace(0.5, 2, 6, dtype=np.float32)))
    ln.bias.set(em.tensor(np.linspace(-1, 1, 6, dtype=np.float32)))
    trms, tln = torch.nn.RMSNorm(6, eps=1e-5), torch.nn.LayerNorm(6, eps=1e-3)
    _copy_into_torch(rms, trms)
    _copy_into_torch(ln, tln)
    _close(rms(em.tensor(x)), trms(torch.from_numpy(x)))
    _close(ln(em.tensor(x)), tln(torch.from_numpy(x)))


class TorchBlock(torch.nn.Module):
    """The torch twin of nn.TransformerBlock (same parameter names), for reference."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.RMSNorm(dim, eps=1e-5), torch.nn.RMSNorm(dim, eps=1e-5)
        self.attn = torch.nn.Module()
        self.attn.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.attn.proj = torch.nn.Linear(dim, dim, bias=False)
        self.mlp = torch.nn.Module()
        self.mlp.gate = torch.nn.Linear(dim, 4 * dim, bias=False)
        self.mlp.up = torch.nn.Linear(dim, 4 * dim, bias=False)
        self.mlp.down = torch.nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        h = self.norm1(x)
        q, k, v = self.attn.qkv(h).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.proj(y.transpose(1, 2).reshape(b, t, c))
        h = self.norm2(x)
        return x + self.mlp.down(F.silu(self.mlp.gate(h)) * self.mlp.up(h))


def _block_pair():
    em.manual_seed(3)
    block = nn.TransformerBlock(16, 4)
    tb = TorchBlock(16, 4)
    _copy_into_torch(block, tb)
    x = np.random.default_rng(3).standard_normal((2, 7, 16)).astype(np.float32)
    return block, tb, x


def test_transformer_block_forward_matches_torch():
    block, tb, x = _block_pair()
    _close(block(em.tensor(x)), tb(torch.from_numpy(x)), 1e-4)


def test_transformer_block_gradients_match_torch():
    block, tb, x = _block_pair()
    xe = em.Var(x)
    w = np.random.default_rng(4).standard_normal((2, 7, 16)).astype(np.float32)
    grads = (block(xe) * em.tensor(w)).sum().backward()
    xt = torch.from_numpy(x).requires_grad_()
    (tb(xt) * torch.from_numpy(w)).sum().backward()
    _close(grads[xe], xt.grad, 1e-4)
    tparams = dict(tb.named_parameters())
    for name, p in block.named_parameters():
        _close(grads[p], tparams[name].grad, 1e-4)


def test_cross_entropy_matches_torch():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((2, 5, 11)).astype(np.float32) * 3
    targets = rng.integers(0, 11, (2, 5))
    tl = torch.from_numpy(logits).requires_grad_()
    ref = F.cross_entropy(tl.reshape(-1, 11), torch.from_numpy(targets).reshape(-1))
    el = em.Var(logits)
    loss = nn.cross_entropy(el, em.tensor(targets))
    assert loss.shape == ()
    assert abs(loss.item() - ref.item()) < 1e-5
    assert abs(nn.cross_entropy(el, targets, reduction="sum").item() - ref.item() * 10) < 1e-4
    _close(nn.cross_entropy(el, targets, reduction="none"),
           F.cross_entropy(tl.reshape(-1, 11), torch.from_numpy(targets).reshape(-1), reduction="none").reshape(2, 5))
    ref.backward()
    _close(loss.backward()[el], tl.grad)


@pytest.mark.parametrize("ignore", [-100, 3])
def test_cross_entropy_ignore_index_matches_torch(ignore):
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((12, 7)).astype(np.float32)
    targets = rng.integers(0, 7, 12)
    targets[[1, 5, 6]] = ignore
    tl = torch.from_numpy(logits).requires_grad_()
    el = em.Var(logits)
    for red in ("mean", "sum", "none"):
        ref = F.cross_entropy(tl, torch.from_numpy(targets), ignore_index=ignore, reduction=red)
        got = nn.cross_entropy(el, targets, reduction=red, ignore_index=ignore)
        _close(got, ref)
    ref = F.cross_entropy(tl, torch.from_numpy(targets), ignore_index=ignore)
    ref.backward()
    _close(nn.cross_entropy(el, targets, ignore_index=ignore).backward()[el], tl.grad)


# ----------------------------------------------------------------------------- Module behaviour
class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.blocks = [nn.Linear(4, 4), nn.Linear(4, 4, bias=False)]
        self.stack = nn.ModuleList([nn.LayerNorm(4)])
        self.head = nn.Linear(4, 5)
        self.head.weight = self.emb.weight  # tied: listed once, under its first name
        self.scale = 2.0

    def forward(self, ids):
        h = self.emb(ids)
        for b in self.blocks:
            h = b(h)
        return self.head(self.stack[0](h)) * self.scale


def test_named_parameters_use_torch_names():
    m = Tiny()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["emb.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                     "stack.0.weight", "stack.0.bias", "head.bias"]
    assert all(p.is_variable for p in m.parameters())
    assert m.num_parameters() == 20 + 20 + 16 + 8 + 5
    assert len(m.modules()) == 7 and len(m.children()) == 5


def test_state_dict_roundtrip_through_safetensors(tmp_path):
    em.manual_seed(6)
    m = Tiny()
    ids = em.tensor([[0, 1, 4], [2, 3, 3]])
    before = m(ids).numpy()
    em.save_safetensors(m.state_dict(), tmp_path / "m.safetensors")
    em.manual_seed(7)
    fresh = Tiny()
    assert not np.array_equal(fresh(ids).numpy(), before)
    storage = fresh.emb.weight.storage
    fresh.load_state_dict(em.load_safetensors(tmp_path / "m.safetensors"))
    assert fresh.emb.weight.storage is storage  # loaded in place into the existing Vars
    np.testing.assert_array_equal(fresh(ids).numpy(), before)
    sd = m.state_dict()
    assert list(sd) == [n for n, _ in m.named_parameters()] and not sd["emb.weight"].is_variable


def test_load_state_dict_errors_and_non_strict():
    m = Tiny()
    sd = m.state_dict()
    with pytest.raises(em.EmberError, match=r"^\[load_state_dict\] missing keys \['head.bias'\]"):
        m.load_state_dict({k: v for k, v in sd.items() if k != "head.bias"})
    with pytest.raises(em.EmberError, match=r"^\[load_state_dict\] .*unexpected keys \['extra'\]"):
        m.load_state_dict({**sd, "extra": em.zeros(1)})
    with pytest.raises(em.ShapeError, match=r"^\[load_state_dict\] head.bias"):
        m.load_state_dict({**sd, "head.bias": em.zeros(4)})
    missing, unexpected = m.load_state_dict({"head.bias": em.ones(5, dtype=em.float16), "x": em.ones(1)},
                                            strict=False)
    assert "emb.weight" in missing and unexpected == ["x"]
    assert m.head.bias.dtype is em.float32 and m.head.bias.tolist() == [1.0] * 5


def test_train_eval_and_call():
    m = Tiny()
    assert m.training and m.eval() is m
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    assert m(em.tensor([1, 2])).shape == (2, 5)
    with pytest.raises(NotImplementedError, match=r"^\[Module\]"):
        nn.Module()(1)


def test_layer_errors():
    with pytest.raises(em.ShapeError, match=r"^\[Linear\]"):
        nn.Linear(3, 2)(em.zeros(2, 4))
    with pytest.raises(em.DTypeError, match=r"^\[Embedding\]"):
        nn.Embedding(3, 2)(em.zeros(2))
    with pytest.raises(em.ShapeError, match=r"^\[CausalSelfAttention\]"):
        nn.CausalSelfAttention(8, 3)
    with pytest.raises(em.ShapeError, match=r"^\[cross_entropy\]"):
        nn.cross_entropy(em.zeros(2, 3), em.tensor([0, 1, 2]))
    with pytest.raises(em.DTypeError, match=r"^\[cross_entropy\]"):
        nn.cross_entropy(em.zeros(2, 3), em.zeros(2))


def test_module_list_of_none_is_empty():
    assert len(nn.ModuleList(None)) == 0 and list(nn.ModuleList(None).parameters()) == []
