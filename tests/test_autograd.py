"""The backward walk and its contract (docs/autograd.md): GradStore semantics, backward twice, detach,
no_grad, second order, pruning, custom rules and NO_BACKWARD, the in-place version check,
gradcheck itself, and the deep/wide graphs that must stay fast and recursion-free."""
import time

import numpy as np
import pytest
import torch
from devcheck import wide

import ember as em
from ember.backprop import NO_BACKWARD, Node, sorted_nodes

from conftest import TEST_DEVICE

WIDE = wide(TEST_DEVICE)  # float64, or float32 on a device without it (then float32 tolerances)
RT, AT = (1e-12, 0.0) if WIDE is em.float64 else (1e-5, 1e-6)


def attach(out, name, inputs, rule=None, saved=None):
    """Records out as the result of a hand-made op (what custom_op.py does)."""
    out._op = Node(name, tuple(inputs), saved, tuple(t.storage.version for t in inputs), rule,
                   out.storage.version)
    return out


# ----------------------------------------------------------------------------- GradStore
def test_store_holds_only_the_variables(rng):
    x = em.Var(rng.standard_normal((3, 4)), dtype=WIDE)
    c = em.tensor(rng.standard_normal(4), dtype=WIDE)  # a plain input: leads to no variable, so gets no gradient
    h = x * c
    y = h.exp()
    loss = y.sum()
    gs = loss.backward()
    assert x in gs and c not in gs
    for t in (h, y, loss):
        assert t not in gs and gs.get(t) is None
    assert len(gs) == 1 and gs.ids() == [x.id]
    e = np.exp(x.numpy() * c.numpy())
    np.testing.assert_allclose(gs[x].numpy(), e * c.numpy(), rtol=RT, atol=AT)


def test_store_api():
    a, b = em.Var([1.0, 2.0]), em.Var([3.0])
    gs = em.GradStore()
    assert len(gs) == 0 and gs.get(a) is None and a not in gs and gs.ids() == []
    with pytest.raises(KeyError):
        gs[a]
    gs.insert(a, em.tensor([1.0, 1.0]))
    assert a in gs and gs.ids() == [a.id] and len(gs) == 1
    np.testing.assert_array_equal(gs[a].numpy(), [1.0, 1.0])
    other = em.GradStore()
    other.insert(a, em.tensor([0.5, 2.0]))
    other.insert(b, em.tensor([7.0]))
    gs.extend(other)  # sums where both hold a gradient
    np.testing.assert_array_equal(gs[a].numpy(), [1.5, 3.0])
    np.testing.assert_array_equal(gs[b].numpy(), [7.0])
    np.testing.assert_array_equal(other[a].numpy(), [0.5, 2.0])  # other is left as it was
    assert len(gs) == 2
    removed = gs.remove(a)
    np.testing.assert_array_equal(removed.numpy(), [1.5, 3.0])
    assert a not in gs and len(gs) == 1 and gs.remove(a) is None
    assert gs.get(b.id) is not None  # ids work as keys too


def test_backward_twice_gives_equal_independent_stores(rng):
    x = em.Var(rng.standard_normal((2, 3)), dtype=WIDE)
    y = (x.sin() * x).sum()
    g1, g2 = y.backward(), y.backward()
    assert g1 is not g2 and g1[x] is not g2[x]
    np.testing.assert_array_equal(g1[x].numpy(), g2[x].numpy())
    assert not g1[x].storage.same_buffer(g2[x].storage)
    g1.remove(x)
    assert x in g2


def test_stored_gradients_never_share_storage():
    """add and sum hand one (broadcast) tensor to both inputs; the store materialises each."""
    x, y = em.Var(np.ones((2, 3)), dtype=WIDE), em.Var(np.ones((2, 3)), dtype=WIDE)
    c = em.tensor(np.ones((2, 3)), dtype=WIDE)
    gs = (x + y + c).sum().backward()
    gx, gy = gs[x], gs[y]
    assert c not in gs and not gx.storage.same_buffer(gy.storage)
    assert gx.layout.is_contiguous() and gy.layout.stride == (3, 1)
    gx.zero_set()
    np.testing.assert_array_equal(gy.numpy(), np.ones((2, 3)))


def test_user_0d_tensors_are_plain_inputs():
    x = em.Var([1.0, 2.0])
    c = em.tensor(2.0)  # a 0-d tensor the user holds: a constant like any plain tensor
    gs = (x * c).sum().backward()
    assert c not in gs and gs[x].tolist() == [2.0, 2.0]
    cv = em.Var(2.0)  # as a variable it gets its gradient
    gs = (x * cv).sum().backward()
    assert gs[cv].shape == () and gs[cv].item() == 3.0


def test_non_scalar_root_seeded_with_ones(rng):
    x = em.Var(rng.standard_normal((3, 2)), dtype=WIDE)
    gs = (x * 3.0).backward()
    np.testing.assert_array_equal(gs[x].numpy(), np.full((3, 2), 3.0))


def test_root_is_variable_or_plain():
    x = em.Var([1.0, 2.0])
    gs = x.backward()
    np.testing.assert_array_equal(gs[x].numpy(), [1.0, 1.0])
    with pytest.raises(em.NoGradientPath, match=r"^\[backward\] .*em\.Var"):
        em.tensor([1.0]).backward()  # nothing leads to a variable: an error, as in torch
    with pytest.raises(em.NoGradientPath, match=r"^\[backward\]"):
        (em.tensor([1.0]) * 2.0).exp().sum().backward()
    with pytest.raises(em.EmberError, match=r"^\[backward\]"):
        em.tensor([1, 2]).backward()


def test_gradients_are_detached_unless_create_graph(rng):
    x = em.Var(rng.standard_normal(3), dtype=WIDE)
    gs = (x * x).sum().backward()
    assert gs[x].op is None and not gs[x].is_variable
    gs = (x * x).sum().backward(create_graph=True)
    assert gs[x].op is not None


# ----------------------------------------------------------------------------- grad mode, detach
def test_no_grad_records_nothing():
    x = em.Var([1.0, 2.0])
    with em.no_grad():
        y = (x * x).exp()
        assert not em.is_grad_enabled()
    assert em.is_grad_enabled()
    assert y.op is None
    with pytest.raises(em.NoGradientPath, match=r"^\[backward\] .*no_grad"):
        y.sum().backward()

    @em.no_grad()
    def f(t):
        return t * 2.0

    assert f(x).op is None and (x * 2.0).op is not None


def test_detach_cuts_the_graph():
    x = em.Var([2.0, 3.0])
    d = x.detach()
    assert d.op is None and not d.is_variable and d.storage.same_buffer(x.storage)
    gs = (d * x).sum().backward()
    np.testing.assert_array_equal(gs[x].numpy(), [2.0, 3.0])  # only the tracked factor
    assert d not in gs and len(gs) == 1  # a plain input gets no gradient


def test_ints_and_argmax_carry_no_gradient():
    x = em.Var([3.0, 1.0, 2.0])
    i = x.argmax()
    assert i.op is None and i.dtype == em.int64
    assert x.affine(0.0, 1.0).op is None  # affine with mul 0 is pruned
    for f in ("ceil", "floor", "round", "sign"):
        assert getattr(x, f)().op is None


def test_walk_prunes_zero_gradient_ops():
    """A node recorded by hand with a pruned op (what a custom op might do) is not walked."""
    x = em.Var([1.5, -2.5])
    r = attach(x.detach().round(), "round", [x])
    a = attach(x.detach().affine(0.0, 1.0), "affine", [x], saved=(0.0, 1.0))
    assert sorted_nodes(r * 2.0 + a) == []  # neither branch reaches x
    y = r * x + a
    assert [t.op.name for t in sorted_nodes(y)] == ["add", "mul"]
    gs = y.sum().backward()
    np.testing.assert_array_equal(gs[x].numpy(), r.numpy())  # only through mul's x factor


def test_custom_op_named_like_a_pruned_op_is_walked():
    x = em.Var([1.0, -2.0])
    y = attach(x.detach().sign(), "sign", [x], rule=lambda n, o, g: (g * 3.0,))
    np.testing.assert_array_equal(y.sum().backward()[x].numpy(), [3.0, 3.0])


# ----------------------------------------------------------------------------- the walk
def test_sorted_nodes_is_topological_and_only_on_paths_to_variables(rng):
    x = em.Var(rng.standard_normal(3), dtype=WIDE)
    c = em.tensor(rng.standard_normal(3), dtype=WIDE)
    a = x.exp()
    b = a * c
    d = a + b
    e = d.sum()
    nodes = sorted_nodes(e)
    assert nodes[0] is e and set(map(id, nodes)) == {id(e), id(d), id(b), id(a)}
    pos = {id(t): i for i, t in enumerate(nodes)}
    for t in nodes:
        for inp in t.op.inputs:
            if id(inp) in pos:
                assert pos[id(t)] < pos[id(inp)]
    assert sorted_nodes(x) == [] and sorted_nodes(c) == []


def test_doubling_chain_is_fast_and_exact():
    a = em.Var([1.0])
    t = a
    for _ in range(60):
        t = t + t
    t0 = time.perf_counter()
    gs = t.backward()
    dt = time.perf_counter() - t0
    assert gs[a].item() == 2.0 ** 60
    assert dt < 2.0, f"backward of 60 doublings took {dt:.3f}s"  # a walk without memo would take ~2**60 steps


def test_deep_chain_has_no_recursion_error():
    a = em.Var([2.0])
    t = a
    for _ in range(100_000):
        t = t.affine(1.0, 0.5)
    gs = t.backward()
    assert gs[a].item() == 1.0
    del t  # tearing down the deep graph must not overflow the C stack either


def test_diamond_accumulates(rng):
    x = em.Var(rng.standard_normal(4), dtype=WIDE)
    a = x.sin()
    y = (a * a + a.exp() + x).sum()
    gs = y.backward()
    xv = x.numpy()
    ref = 2 * np.sin(xv) * np.cos(xv) + np.exp(np.sin(xv)) * np.cos(xv) + 1
    np.testing.assert_allclose(gs[x].numpy(), ref, rtol=RT, atol=AT)


def test_shared_subgraph_visited_once(monkeypatch):
    """Each node's rule runs exactly once however many paths reach it."""
    from ember import grad_rules

    calls = []
    orig = grad_rules.RULES["add"]
    monkeypatch.setitem(grad_rules.RULES, "add", lambda n, o, g: calls.append(1) or orig(n, o, g))
    a = em.Var([1.0])
    t = a
    for _ in range(30):
        t = t + t
    t.backward()
    assert len(calls) == 30


# ----------------------------------------------------------------------------- second order
def test_second_order_of_cube():
    x = em.Var([0.5, -1.0, 2.0])
    for y in (x * x * x, x.powf(3), x.sqr() * x):
        g = y.sum().backward(create_graph=True)[x]
        np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2, rtol=1e-6)
        gg = g.sum().backward()[x]
        np.testing.assert_allclose(gg.numpy(), 6 * x.numpy(), rtol=1e-6)
        assert gg.op is None


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "exp", "sin", "gelu", "silu", "index", "matmul", "max",
                                  "narrow", "cat", "where", "gather"])
def test_second_order_matches_torch(rng, name):
    xs = rng.uniform(-1.5, 1.5, (3, 4))
    ws = rng.uniform(-1, 1, (4, 2))
    fe = {"tanh": lambda x: x.tanh(), "sigmoid": lambda x: x.sigmoid(), "exp": lambda x: x.exp(),
          "sin": lambda x: x.sin(), "gelu": lambda x: x.gelu(), "silu": lambda x: x.silu(),
          "index": lambda x: x[1:, ::2].sqr(), "matmul": lambda x: (x @ em.tensor(ws, dtype=WIDE)).sqr(),
          "max": lambda x: x.max(1) * x.sum(1), "narrow": lambda x: x.narrow(1, 1, 2).sqr(),
          "cat": lambda x: em.cat([x, x.sin()], 0).sqr(),
          "where": lambda x: em.where(x.gt(0.0), x.sqr(), x.exp()),
          "gather": lambda x: x.gather(em.tensor([[0, 3], [1, 1], [2, 0]]), 1).sqr()}[name]
    ft = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "exp": torch.exp, "sin": torch.sin,
          "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
          "index": lambda x: x[1:, ::2].square(), "matmul": lambda x: (x @ torch.tensor(ws)).square(),
          "max": lambda x: x.amax(1) * x.sum(1), "narrow": lambda x: x.narrow(1, 1, 2).square(),
          "cat": lambda x: torch.cat([x, x.sin()], 0).square(),
          "where": lambda x: torch.where(x > 0, x.square(), x.exp()),
          "gather": lambda x: x.gather(1, torch.tensor([[0, 3], [1, 1], [2, 0]])).square()}[name]
    x = em.Var(xs, dtype=WIDE)
    g = fe(x).sum().backward(create_graph=True)[x]
    gg = (g * g).sum().backward()[x]
    tx = torch.tensor(x.numpy().astype(np.float64), requires_grad=True)
    (tg,) = torch.autograd.grad(ft(tx).sum(), tx, create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), tx)
    rtol, atol = (1e-10, 1e-12) if WIDE is em.float64 else (1e-4, 1e-5)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=rtol * 10, atol=atol)


# ----------------------------------------------------------------------------- rules: custom, missing
def test_missing_rule_raises_backward_not_supported():
    x = em.Var([1.0, 2.0])
    y = attach(x.detach().exp(), "mystery", [x])
    with pytest.raises(em.BackwardNotSupported) as ei:
        (y * 2.0).sum().backward()
    assert ei.value.op == "mystery" and str(ei.value).startswith("[mystery]")
    assert isinstance(ei.value, em.EmberError)


def test_no_backward_marker_raises_with_advice():
    x = em.Var([1.0, 2.0])
    y = attach(x.detach().exp(), "softplus", [x], rule=NO_BACKWARD)
    with pytest.raises(em.BackwardNotSupported) as ei:
        y.sum().backward()
    msg = str(ei.value)
    assert ei.value.op == "softplus" and msg.startswith("[softplus]")
    assert "apply_op1" in msg and "detach()" in msg
    # not on a path to a variable: never reached, no error
    z = attach(em.tensor([1.0]).exp(), "softplus", [em.tensor([1.0])], rule=NO_BACKWARD)
    gs = (z * x).sum().backward()
    np.testing.assert_allclose(gs[x].numpy(), [np.e, np.e])


def test_custom_rule_and_none_gradients():
    x, w = em.Var([1.0, 2.0]), em.Var([3.0, 4.0])
    h = x * 1.0  # an intermediate input of the custom op

    def rule(node, out, g):
        a, _ = node.inputs
        assert out is y
        return None, g * a  # no gradient for the intermediate: its branch is skipped, not a crash

    y = attach((h * w).detach(), "custom2", [h, w], rule=rule)
    gs = y.sum().backward()
    assert x not in gs
    np.testing.assert_array_equal(gs[w].numpy(), [1.0, 2.0])
    attach(y, "custom2", [h, w], rule=lambda node, out, g: None)  # all None is fine too
    assert len(y.sum().backward()) == 0


def test_custom_rule_results_are_checked():
    x = em.Var([1.0, 2.0])
    y = attach(x.detach().exp(), "bad", [x], rule=lambda n, o, g: (g.sum(),))
    with pytest.raises(em.ShapeError, match=r"^\[bad\]"):
        y.sum().backward()
    attach(y, "bad", [x], rule=lambda n, o, g: (g, g))
    with pytest.raises(em.EmberError, match=r"^\[bad\] bwd returned 2 gradients for 1 inputs"):
        y.sum().backward()
    attach(y, "bad", [x], rule=lambda n, o, g: (g.to_dtype(em.float16),))
    with pytest.raises(em.DTypeError, match=r"^\[bad\]"):
        y.sum().backward()
    attach(y, "good", [x], rule=lambda n, o, g: g * o)  # a single Tensor is accepted for one input
    np.testing.assert_allclose(y.sum().backward()[x].numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_custom_rule_returning_a_graph_tensor_is_detached():
    x = em.Var([1.0, 2.0])
    y = attach(x.detach() * 1.0, "ident", [x], rule=lambda n, o, g: (n.inputs[0] * 0.0 + g,))
    gs = y.sum().backward()
    assert gs[x].op is None


# ----------------------------------------------------------------------------- in-place check
def _raises_inplace(fn, op):
    with pytest.raises(em.InplaceModifiedError) as ei:
        fn()
    assert isinstance(ei.value, em.EmberError)
    msg = str(ei.value)
    assert msg.startswith("[backward]") and f" {op} " in msg and "version" in msg, msg


def test_set_after_save_raises():
    x = em.Var([1.0, 2.0])
    y = (x * x).sum()
    x.set(em.tensor([5.0, 6.0]))
    _raises_inplace(y.backward, "mul")


def test_slice_set_and_zero_set_on_saved_intermediate_raise():
    x = em.Var(np.arange(6.0).reshape(2, 3), dtype=WIDE)
    h = x * 2.0
    y = h.sin().sum()
    h.slice_set(em.zeros(2, 1, dtype=WIDE), 1, 0)
    _raises_inplace(y.backward, "sin")
    e = x.exp()
    z = e.sum() + e.t().sum()  # sum and views read no values
    e.zero_set()  # exp's rule reads its result
    _raises_inplace(z.backward, "exp")


class _Halve(em.InplaceOp1):
    name = "halve_"

    def cpu_fwd(self, s, l):
        v = s.as_numpy(l)
        v *= v.dtype.type(0.5)


@pytest.mark.cpu_only  # an InplaceOp1 written as cpu_fwd over as_numpy
def test_inplace_op_on_saved_tensor_raises():
    x = em.Var([1.0, 2.0, 3.0])
    h = x * 1.0
    y = h.sin().sum() + h.narrow(0, 0, 2).sum()  # narrow reads no values
    h.detach().inplace_op1(_Halve())  # through a detached alias: the storage's version still moves
    _raises_inplace(y.backward, "sin")
    z = (x * x).sum()
    with em.no_grad():  # on a variable, an in-place op runs only under no_grad (as v[0] = 5)
        x.inplace_op1(_Halve())
    _raises_inplace(z.backward, "mul")


def test_write_through_a_view_is_seen():
    x = em.Var(np.ones((2, 3)), dtype=WIDE)
    v = x[0]
    y = (v * v).sum()
    x.narrow(1, 0, 1).zero_set()  # another view of the same storage
    _raises_inplace(y.backward, "mul")


def test_harmless_inplace_edits_do_not_raise():
    x = em.Var([1.0, 2.0])
    y = (x + 1.0).sum() + x.narrow(0, 0, 1).sum() * 3.0
    x.set(em.tensor([9.0, 9.0]))  # add, narrow, sum and the scalar mul never read x's values
    np.testing.assert_array_equal(y.backward()[x].numpy(), [4.0, 1.0])


def test_modify_after_backward_is_fine():
    x = em.Var([1.0, 2.0])
    g = (x * x).sum().backward()[x]
    x.set(x.detach() - g * 0.1)  # an optimizer step
    np.testing.assert_allclose((x * x).sum().backward()[x].numpy(), [1.6, 3.2], rtol=1e-6)


# ----------------------------------------------------------------------------- gradcheck
@pytest.mark.cpu_only  # em.testing.gradcheck differentiates in float64 (devcheck covers other devices)
def test_gradcheck_passes_and_fails():
    x = em.randn(3, 4)
    assert em.testing.gradcheck(lambda a: (a.tanh() * a).sum(1), [x])
    assert em.testing.gradcheck(lambda a, b: (a @ b, a.exp()), [x, em.randn(4, 2)])
    wrong = lambda n, o, g: (g * 2.0,)

    def f(a):
        return attach(a.detach().exp(), "wrongexp", [a], rule=wrong)

    with pytest.raises(em.EmberError, match=r"^\[gradcheck\] input 0 element \(\d+, \d+\)") as ei:
        em.testing.gradcheck(f, [x])
    assert isinstance(ei.value, AssertionError)
    with pytest.raises(em.EmberError, match=r"^\[gradcheck\]"):
        em.testing.gradcheck(lambda a: a, [em.tensor([1, 2])])


@pytest.mark.cpu_only  # em.testing.gradcheck differentiates in float64
def test_gradcheck_uses_float64_and_passes_other_args_through():
    seen = []

    def f(a, k):
        seen.append(a.dtype)
        return a * k

    assert em.testing.gradcheck(f, [em.randn(3, dtype=em.float32), 3])
    assert set(seen) == {em.float64}


def test_rules_reading_the_result_get_its_version_recorded():
    """record() reads the result's version only for ops in backprop._READS_OUT; it must list every
    table rule that reads its result, or the in-place check would silently skip them."""
    from ember import backprop, grad_rules

    assert {n for n, (_, out) in grad_rules.USES.items() if out} == set(backprop._READS_OUT)
    x = em.Var([1.0, 2.0])
    assert x.exp().op.out_version == 0 and (x + 1.0).op.out_version is None
