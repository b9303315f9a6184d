"""InstanceNorm1d/2d and instance_norm against torch: outputs, gradients, running statistics, eval mode."""
import numpy as np
import pytest
import torch

import ember as em
from ember import nn

from conftest import TOL, WIDE


def _np(t):
    return t.to_device("cpu").to_dtype(em.float64).numpy()


_CASES = [("InstanceNorm1d", (3, 4, 7)), ("InstanceNorm1d", (4, 5)), ("InstanceNorm2d", (2, 4, 5, 6)),
          ("InstanceNorm2d", (4, 3, 3))]


@pytest.mark.parametrize("cls,shape", _CASES)
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("track", [False, True])
def test_like_torch(device, cls, shape, affine, track):
    rng = np.random.default_rng(0)
    m = getattr(nn, cls)(4, affine=affine, track_running_stats=track, momentum=0.3, dtype=WIDE, device=device)
    t = getattr(torch.nn, cls)(4, affine=affine, track_running_stats=track, momentum=0.3, dtype=torch.float64)
    assert repr(m) == repr(t)
    assert list(m.state_dict()) == list(t.state_dict())
    if affine:
        w, b = rng.standard_normal(4), rng.standard_normal(4)
        m.weight.set(em.tensor(w, dtype=WIDE, device=device))
        m.bias.set(em.tensor(b, dtype=WIDE, device=device))
        t.weight.data, t.bias.data = torch.tensor(w), torch.tensor(b)
    rtol, atol = (r * 20 for r in TOL[WIDE.name])
    for _step in range(2):  # two training steps move the running statistics twice
        x = rng.standard_normal(shape) * 3 + 1
        up = rng.standard_normal(shape)
        xv = em.Var(em.tensor(x, dtype=WIDE, device=device))
        y = m(xv)
        g = (y * em.tensor(up, dtype=WIDE, device=device)).sum().backward()
        xt = torch.tensor(x, requires_grad=True)
        yt = t(xt)
        (yt * torch.tensor(up)).sum().backward()
        np.testing.assert_allclose(_np(y), yt.detach().numpy(), rtol=rtol, atol=atol)
        np.testing.assert_allclose(_np(g[xv]), xt.grad.numpy(), rtol=rtol, atol=atol)
        if affine:
            np.testing.assert_allclose(_np(g[m.weight]), t.weight.grad.numpy(), rtol=rtol, atol=atol)
            np.testing.assert_allclose(_np(g[m.bias]), t.bias.grad.numpy(), rtol=rtol, atol=atol)
            t.weight.grad = t.bias.grad = None
    for (n, b), (tn, tb) in zip(m.named_buffers(), t.named_buffers()):
        assert n == tn
        np.testing.assert_allclose(_np(b), tb.numpy(), rtol=rtol, atol=atol, err_msg=n)
    m.eval()
    t.eval()
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(_np(m(em.tensor(x, dtype=WIDE, device=device))), t(torch.tensor(x)).detach().numpy(),
                               rtol=rtol, atol=atol)


def test_momentum_none_and_functional(device):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6))
    rm, rv = em.zeros(3, dtype=WIDE, device=device), em.ones(3, dtype=WIDE, device=device)
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    y = nn.functional.instance_norm(em.tensor(x, dtype=WIDE, device=device), rm, rv, momentum=0.5)
    yt = torch.nn.functional.instance_norm(torch.tensor(x), trm, trv, momentum=0.5)
    rtol, atol = (r * 20 for r in TOL[WIDE.name])
    np.testing.assert_allclose(_np(y), yt.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(_np(rm), trm.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(_np(rv), trv.numpy(), rtol=rtol, atol=atol)
    m = nn.InstanceNorm1d(3, momentum=None, track_running_stats=True, device=device)
    m(em.tensor(x, dtype=em.float32, device=device))
    np.testing.assert_array_equal(_np(m.running_mean), np.zeros(3))  # torch takes momentum None as 0


def test_errors():
    with pytest.raises(em.ShapeError, match=r"\[instance_norm\] expected more than 1 spatial element"):
        nn.InstanceNorm1d(3)(em.ones(2, 3, 1))
    with pytest.raises(em.ShapeError, match=r"\[InstanceNorm2d\] expected a 3-D"):
        nn.InstanceNorm2d(3)(em.ones(2, 3))
    with pytest.raises(em.ShapeError, match=r"\[InstanceNorm1d\] expected 3 channels"):
        nn.InstanceNorm1d(3, affine=True)(em.ones(2, 4, 5))
    with pytest.raises(em.EmberValueError, match=r"\[instance_norm\] give both"):
        nn.instance_norm(em.ones(2, 3, 4), em.zeros(3))
    with pytest.raises(em.EmberValueError, match=r"\[instance_norm\] use_input_stats=False"):
        nn.instance_norm(em.ones(2, 3, 4), use_input_stats=False)
    with pytest.raises(em.ShapeError, match=r"\[instance_norm\] expected an input"):
        nn.instance_norm(em.ones(2, 3))
    with pytest.raises(em.DTypeError, match=r"\[instance_norm\]"):
        nn.instance_norm(em.ones(2, 3, 4, dtype=em.int64))
    with pytest.raises(em.ShapeError, match=r"\[InstanceNorm1d\] num_features"):
        nn.InstanceNorm1d(0)
