"""em.multinomial on the device under test: chi-square checks of the draws against the weights (with and
without replacement), distinct draws without replacement, zero weights, reproducibility, strided and half
weights, and every [multinomial] error torch raises."""
import math

import numpy as np
import pytest

import ember as em

from conftest import FLOATS, expect_error, npdt

# Each chi-square test below compares counts from a fixed seed with a critical value at p = 1e-4: were
# the sampler exact, an unlucky seed would fail a test with probability 1e-4; a wrong sampler fails it
# by orders of magnitude (a 1% bias in one category of 60000 draws gives a statistic above 50).
P_FALSE = 1e-4


def chi2_critical(df, p=P_FALSE):
    """The (1 - p) quantile of chi-square with df degrees of freedom (Wilson-Hilferty, a few % accurate)."""
    z = _normal_quantile(1 - p)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _normal_quantile(q):
    lo, hi = 0.0, 10.0  # bisection on the normal CDF: z with Phi(z) = q
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * math.erfc(-mid / math.sqrt(2)) < q else (lo, mid)
    return lo


def check_counts(draws, probs):
    """Chi-square of the draws' category counts against probs (categories of probability 0 must be empty)."""
    probs = np.asarray(probs, np.float64)
    counts = np.bincount(np.asarray(draws).reshape(-1), minlength=len(probs))
    assert counts[probs == 0].sum() == 0, counts
    pos = probs > 0
    expected = counts.sum() * probs[pos]
    stat = float(((counts[pos] - expected) ** 2 / expected).sum())
    assert stat < chi2_critical(pos.sum() - 1), (stat, counts, expected)


W = np.array([3.0, 0.0, 1.0, 0.5, 2.5, 1.0])  # unnormalised, one zero


def test_with_replacement_follows_the_weights(device):
    em.manual_seed(1)
    draws = em.multinomial(em.tensor(W.astype(np.float32), device=device), 60000, replacement=True)
    assert draws.dtype == em.int64 and draws.shape == (60000,) and draws.device == device
    check_counts(draws.numpy(), W / W.sum())


def test_without_replacement_first_and_second_draws_follow_the_weights(device):
    em.manual_seed(2)
    rows = 6000
    p = em.tensor(np.tile(W.astype(np.float32), (rows, 1)), device=device)
    draws = em.multinomial(p, 3).numpy()
    assert draws.shape == (rows, 3)
    q = W / W.sum()
    check_counts(draws[:, 0], q)
    # P(second = j) = sum_i q_i q_j / (1 - q_i), i != j: the law of drawing without replacement
    second = np.array([sum(q[i] * q[j] / (1 - q[i]) for i in range(len(q)) if i != j) for j in range(len(q))])
    check_counts(draws[:, 1], second)


@pytest.mark.parametrize("dt", FLOATS)
def test_without_replacement_never_repeats(device, dt, rng):
    em.manual_seed(3)
    w = rng.random((5, 300)).astype(npdt(dt))
    full = em.multinomial(em.tensor(w, device=device), 300).numpy()
    for row in full:  # every category once
        np.testing.assert_array_equal(np.sort(row), np.arange(300))
    some = em.multinomial(em.tensor(w, device=device), 40).numpy()
    assert all(len(set(row)) == 40 for row in some)


def test_zero_weights_come_last_in_index_order_without_replacement(device):
    p = em.tensor([0.0, 1.0, 0.0, 2.0, 0.0], device=device)
    for seed in range(5):
        em.manual_seed(seed)
        d = em.multinomial(p, 5).tolist()
        assert sorted(d[:2]) == [1, 3] and d[2:] == [0, 2, 4], d
        assert 0 not in em.multinomial(p, 50, replacement=True).tolist()


def test_vocab_sized_row_and_a_dominant_weight(device, rng):
    w = rng.random(50257).astype(np.float32) * 1e-6
    w[31337] = 1.0  # 99.7% of the mass
    em.manual_seed(4)
    x = em.tensor(w, device=device)
    one = em.multinomial(x, 1)
    assert one.shape == (1,) and 0 <= one.item() < 50257
    draws = em.multinomial(x, 200, replacement=True).numpy()
    assert (draws == 31337).sum() > 180  # binomial(200, 0.997): more than 180 misses has p < 1e-100
    assert 31337 in em.multinomial(x, 10).tolist()  # missed by 10 draws without replacement: p < 1e-20


def test_seeded_draws_are_reproducible(device, rng):
    w = em.tensor(rng.random((3, 1000)).astype(np.float32), device=device)
    for replacement in (False, True):
        em.manual_seed(11)
        a = em.multinomial(w, 20, replacement).numpy()
        b = em.multinomial(w, 20, replacement).numpy()
        em.manual_seed(11)
        np.testing.assert_array_equal(em.multinomial(w, 20, replacement).numpy(), a)
        assert not np.array_equal(a, b)  # the generator moved on


def test_strided_weights_draw_as_their_contiguous_copy(device, rng):
    base = rng.random((40, 7)).astype(np.float32)
    t = em.tensor(base, device=device).transpose(0, 1)  # (7, 40), column stride 7
    for replacement in (False, True):
        em.manual_seed(5)
        a = em.multinomial(t, 30, replacement).numpy()
        em.manual_seed(5)
        b = em.multinomial(em.tensor(np.ascontiguousarray(base.T), device=device), 30, replacement).numpy()
        np.testing.assert_array_equal(a, b)
    em.manual_seed(6)
    a = em.multinomial(t[2], 10).numpy()  # a 1-D row with stride 7
    em.manual_seed(6)
    np.testing.assert_array_equal(a, em.multinomial(em.tensor(base[:, 2].copy(), device=device), 10).numpy())


def test_empty_batch(device):
    out = em.multinomial(em.ones(0, 4, device=device), 2)
    assert out.shape == (0, 2) and out.dtype == em.int64


def test_errors(device):
    ok = em.tensor([1.0, 2.0, 3.0], device=device)
    expect_error(lambda: em.multinomial([1.0, 2.0], 1), "multinomial", em.EmberTypeError)
    expect_error(lambda: em.multinomial(em.tensor([1, 2], device=device), 1), "multinomial", em.DTypeError)
    expect_error(lambda: em.multinomial(em.ones(2, 2, 2, device=device), 1), "multinomial", em.ShapeError)
    expect_error(lambda: em.multinomial(em.tensor(1.0, device=device), 1), "multinomial", em.ShapeError)
    expect_error(lambda: em.multinomial(ok, 0), "multinomial", em.EmberValueError)
    expect_error(lambda: em.multinomial(ok, 1.5), "multinomial", em.EmberTypeError)
    expect_error(lambda: em.multinomial(ok, 4), "multinomial", em.EmberValueError)
    expect_error(lambda: em.multinomial(ok, 1, replacement=2), "multinomial", em.EmberValueError)
    expect_error(lambda: em.multinomial(ok, 1, generator=object()), "multinomial", em.EmberTypeError)
    expect_error(lambda: em.multinomial(em.ones(2, 0, device=device), 1, True), "multinomial", em.EmberValueError)
    for bad in ([-1.0, 1.0], [math.nan, 1.0], [math.inf, 1.0]):
        for replacement in (False, True):
            e = expect_error(lambda b=bad, r=replacement: em.multinomial(em.tensor(b, device=device), 1, r),
                             "multinomial",
                             em.EmberValueError)
            assert "inf, nan or element < 0" in str(e)
    e = expect_error(lambda: em.multinomial(em.tensor([[1.0, 1.0], [0.0, 0.0]], device=device), 1), "multinomial",
                     em.EmberValueError)
    assert "sum of probabilities <= 0" in str(e)
    bad = em.Layout([4], [1], 0)  # reaches past the 3-element storage
    expect_error(lambda: em._C.multinomial(ok._storage, bad, 1, True), "multinomial", em.IndexOutOfRange)


def test_demo_sample_draws_among_the_top_k_seeded(device):
    from ember import demo
    data = demo.CharData(demo.load_corpus()[:2000], 16, 0)
    em.manual_seed(0)
    model = demo.CharTransformer(len(data.chars), dim=16, n_layers=1, n_heads=2, ctx=16, device=device)
    a = demo.sample(model, data, "The ", 12, device, seed=3)
    assert a.startswith("The ") and len(a) == 16
    assert demo.sample(model, data, "The ", 12, device, seed=3) == a  # the seed decides the text
    # top_k = 1 is greedy decoding: the argmax of the logits at every step
    ids = [data.index[c] for c in "The "]
    with em.no_grad():
        for _ in range(12):
            logits = model(em.tensor([ids[-16:]], dtype=em.int64, device=device))[0, -1].numpy()
            ids.append(int(np.argmax(logits)))
    assert demo.sample(model, data, "The ", 12, device, seed=9, top_k=1) == data.decode(ids)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_the_kernel_checks_the_weights_at_any_position(dt, device, rng):
    # the checks run in the kernel (no Python pass): call it directly, at positions in the first block,
    # inside a full 64-weight block, in a row's tail, and in one row of several
    n = 200
    for repl in (False, True):
        for pos in (0, 70, 127, 199):
            for bad, what in ((-1.0, "element < 0"), (math.nan, "nan"), (math.inf, "inf")):
                w = rng.random((4, n)).astype(npdt(dt)) + np.asarray(0.1, npdt(dt))
                w[2, pos] = bad
                t = em.tensor(w, device=device)
                e = expect_error(lambda t=t, r=repl: em._C.multinomial(t._storage, t._layout, 3, r), "multinomial",
                                 em.EmberValueError)
                assert "inf, nan or element < 0" in str(e), (what, str(e))
        w = rng.random((3, n)).astype(npdt(dt))
        w[1] = 0
        t = em.tensor(w, device=device)
        e = expect_error(lambda t=t, r=repl: em._C.multinomial(t._storage, t._layout, 2, r), "multinomial",
                         em.EmberValueError)
        assert "sum of probabilities <= 0" in str(e)


def test_weights_outside_a_strided_view_are_not_checked(device, rng):
    w = rng.random((6, 300)).astype(np.float32) + 0.1
    w[:, 1::2] = np.nan  # only the even columns are in the view
    w[1::2] = -1.0  # only the even rows are in the view
    t = em.tensor(w, device=device)[::2, ::2]
    for repl in (False, True):
        d = em.multinomial(t, 5, repl).numpy()
        assert d.shape == (3, 5) and ((d >= 0) & (d < 150)).all()


@pytest.mark.cpu_only(reason="float64 weights: only the CPU holds float64")
def test_float64_weights_whose_sum_overflows_are_refused():
    w = em.tensor(np.array([1.5e308, 1.5e308, 1.0]))
    e = expect_error(lambda: em.multinomial(w, 2, True), "multinomial", em.EmberValueError)
    assert "inf, nan or element < 0" in str(e)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_with_replacement_on_long_rows_follows_the_weights(dt, device, rng):
    # rows of several 64-weight blocks and a partial last one; zero weights inside full blocks never drawn
    n = 333
    w = rng.random(n) + 0.5
    w[rng.choice(n, 40, replace=False)] = 0.0
    w[64], w[127], w[128], w[332] = 0.0, 0.0, 0.0, 0.0
    em.manual_seed(8)
    x = em.tensor(np.tile(w.astype(npdt(dt)), (4, 1)), device=device)
    draws = em.multinomial(x, 50000, replacement=True).numpy()
    wq = w.astype(npdt(dt)).astype(np.float64)
    check_counts(draws, wq / wq.sum())


def test_strided_long_rows_draw_as_their_contiguous_copy(device, rng):
    base = rng.random((500, 9)).astype(np.float32)
    t = em.tensor(base, device=device).transpose(0, 1)  # (9, 500), column stride 9
    c = em.tensor(np.ascontiguousarray(base.T), device=device)
    for replacement in (False, True):
        em.manual_seed(12)
        a = em.multinomial(t, 200, replacement).numpy()
        em.manual_seed(12)
        np.testing.assert_array_equal(a, em.multinomial(c, 200, replacement).numpy())


@pytest.mark.parametrize("dt", [d for d in (em.float32, em.float64) if d in FLOATS], ids=lambda d: d.name)
def test_without_replacement_huge_weights_are_unbiased(device, dt):
    # w / E overflows for weights near the dtype's max: ties at +inf drew index 0 first (0.61 / 0.27 / 0.12)
    big = 3e38 if dt is em.float32 else 1.5e308
    em.manual_seed(4)
    rows = 6000
    draws = em.multinomial(em.tensor(np.full((rows, 3), big, npdt(dt)), device=device), 3).numpy()
    check_counts(draws[:, 0], [1 / 3] * 3)
    check_counts(draws[:, 1], [1 / 3] * 3)
    w = np.array([big, big / 2, big / 4], npdt(dt))  # unequal huge weights keep their ratios
    first = em.multinomial(em.tensor(np.tile(w, (rows, 1)), device=device), 1).numpy()[:, 0]
    r = w.astype(np.float64) / big  # (their sum overflows)
    check_counts(first, r / r.sum())
