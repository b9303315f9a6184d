"""em.optim.lr_scheduler against torch.optim.lr_scheduler: the same lr sequence, exactly, over many steps."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import TOL, WIDE, WIDE_NP

TL = torch.optim.lr_scheduler
EL = em.optim.lr_scheduler


def _pair(opt_name="SGD", lrs=(0.1, 0.03), **kw):
    """An ember and a torch optimizer with one param group per lr."""
    eg = [{"params": [em.Var(np.ones(2, np.float32))], "lr": lr} for lr in lrs]
    tg = [{"params": [torch.ones(2, requires_grad=True)], "lr": lr} for lr in lrs]
    return getattr(em.optim, opt_name)(eg, **kw), getattr(torch.optim, opt_name)(tg, **kw)


def _lrs(opt):
    return [g["lr"] for g in opt.param_groups]


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g.get("momentum") for g in opt.param_groups]


def _run(eo, to, es, ts, steps):
    """Steps both schedules (after an optimizer step, as torch wants) and compares every lr exactly."""
    assert _lrs(eo) == _lrs(to) and es.get_last_lr() == ts.get_last_lr()
    for i in range(steps):
        to.step()
        es.step()
        ts.step()
        assert _lrs(eo) == _lrs(to), (i, _lrs(eo), _lrs(to))
        assert es.get_last_lr() == ts.get_last_lr()
        assert _momenta(eo) == _momenta(to)


SCHEDULES = {
    "StepLR": lambda L, o: L.StepLR(o, step_size=7, gamma=0.3),
    "MultiStepLR": lambda L, o: L.MultiStepLR(o, milestones=[5, 11, 11, 40], gamma=0.7),
    "ExponentialLR": lambda L, o: L.ExponentialLR(o, gamma=0.93),
    "CosineAnnealingLR": lambda L, o: L.CosineAnnealingLR(o, T_max=17, eta_min=0.001),
    "LinearLR": lambda L, o: L.LinearLR(o, start_factor=0.05, end_factor=0.9, total_iters=13),
    "LinearLR-defaults": lambda L, o: L.LinearLR(o),
    "ConstantLR": lambda L, o: L.ConstantLR(o, factor=0.3, total_iters=9),
    "LambdaLR": lambda L, o: L.LambdaLR(o, lambda s: 0.97 ** s / (1 + s % 3)),
    "LambdaLR-per-group": lambda L, o: L.LambdaLR(o, [lambda s: 1 / (s + 1), lambda s: min(1.0, (s + 1) / 10)]),
    "OneCycleLR": lambda L, o: L.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=120),
    "OneCycleLR-linear-3phase": lambda L, o: L.OneCycleLR(o, max_lr=0.4, epochs=6, steps_per_epoch=20,
                                                          anneal_strategy="linear", three_phase=True, pct_start=0.25),
    "warmup-cosine": lambda L, o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.01, total_iters=10),
                                                     L.CosineAnnealingLR(o, T_max=50)], milestones=[10]),
    "constant-exp-step": lambda L, o: L.SequentialLR(o, [L.ConstantLR(o, factor=0.5, total_iters=4),
                                                         L.ExponentialLR(o, gamma=0.9),
                                                         L.StepLR(o, step_size=5)], milestones=[6, 30]),
}


@pytest.mark.parametrize("opt_name", ["SGD", "AdamW"])
@pytest.mark.parametrize("which", list(SCHEDULES))
def test_lr_sequence_equals_torch(which, opt_name):
    kw = {"momentum": 0.9} if opt_name == "SGD" else {}
    eo, to = _pair(opt_name, **kw)
    es, ts = SCHEDULES[which](EL, eo), SCHEDULES[which](TL, to)
    _run(eo, to, es, ts, 119 if "OneCycle" in which else 150)


@pytest.mark.parametrize("which", ["StepLR", "MultiStepLR", "CosineAnnealingLR", "LinearLR", "OneCycleLR",
                                   "warmup-cosine", "LambdaLR"])
def test_state_dict_resumes_the_sequence(which, tmp_path):
    """Run 23 steps, save optimizer and schedule (through em.save), rebuild both, load, and the next
    steps equal torch's uninterrupted sequence."""
    eo, to = _pair("AdamW")
    es, ts = SCHEDULES[which](EL, eo), SCHEDULES[which](TL, to)
    for _ in range(23):
        to.step()
        es.step()
        ts.step()
    em.save({"optim": eo.state_dict(), "sched": es.state_dict()}, tmp_path / "s.safetensors")
    ck = em.load(tmp_path / "s.safetensors")
    eo2, _ = _pair("AdamW", lrs=(5.0, 6.0))
    es2 = SCHEDULES[which](EL, eo2)
    eo2.load_state_dict(ck["optim"])
    es2.load_state_dict(ck["sched"])
    assert _lrs(eo2) == _lrs(to) and es2.get_last_lr() == ts.get_last_lr()
    _run(eo2, to, es2, ts, 60)


def test_resume_with_last_epoch_matches_torch():
    eo, to = _pair()
    for o in (eo, to):
        for g in o.param_groups:
            g["initial_lr"] = g["lr"]
    es, ts = EL.CosineAnnealingLR(eo, T_max=10, last_epoch=4), TL.CosineAnnealingLR(to, T_max=10, last_epoch=4)
    _run(eo, to, es, ts, 30)
    fresh, _ = _pair()
    with pytest.raises(em.EmberError, match=r"^\[StepLR\] param_groups\[0\] has no 'initial_lr'"):
        EL.StepLR(fresh, 3, last_epoch=5)


def test_schedule_drives_training():
    """An optimizer step uses the lr the schedule set: ember's params follow torch's."""
    rng = np.random.default_rng(0)
    init = rng.standard_normal(5).astype(WIDE_NP)
    v, tv = em.Var(init), torch.tensor(init, requires_grad=True)
    eo, to = em.optim.SGD([v], lr=0.5, momentum=0.9), torch.optim.SGD([tv], lr=0.5, momentum=0.9)
    es, ts = EL.OneCycleLR(eo, max_lr=1.0, total_steps=20), TL.OneCycleLR(to, max_lr=1.0, total_steps=20)
    for _ in range(20):
        g = rng.standard_normal(5).astype(WIDE_NP)
        store = em.GradStore()
        store.insert(v, em.tensor(g))
        eo.step(store)
        tv.grad = torch.from_numpy(g)
        to.step()
        es.step()
        ts.step()
    tol = (1e-14, 1e-14) if WIDE is em.float64 else TOL[WIDE.name]
    np.testing.assert_allclose(v.numpy(), tv.detach().numpy(), rtol=tol[0], atol=tol[1])


@pytest.mark.parametrize("make,match", [
    (lambda o: EL.StepLR(o, step_size=0), r"^\[StepLR\] step_size must be positive"),
    (lambda o: EL.StepLR(None, 3), r"^\[StepLR\] expects an em.optim optimizer"),
    (lambda o: EL.StepLR(o, 2.5), r"^\[StepLR\] step_size must be an int"),
    (lambda o: EL.MultiStepLR(o, 5), r"^\[MultiStepLR\] milestones must be a list"),
    (lambda o: EL.CosineAnnealingLR(o, 0), r"^\[CosineAnnealingLR\] T_max must be positive"),
    (lambda o: EL.LinearLR(o, start_factor=0.0), r"^\[LinearLR\] start_factor must be in"),
    (lambda o: EL.LinearLR(o, end_factor=1.5), r"^\[LinearLR\] end_factor must be in"),
    (lambda o: EL.ConstantLR(o, factor=2.0), r"^\[ConstantLR\] factor must be in"),
    (lambda o: EL.LambdaLR(o, [lambda s: 1.0]), r"^\[LambdaLR\] expected 2 lr_lambdas"),
    (lambda o: EL.LambdaLR(o, 3.0), r"^\[LambdaLR\] lr_lambda must be a function"),
    (lambda o: EL.OneCycleLR(o, 0.1), r"^\[OneCycleLR\] give total_steps"),
    (lambda o: EL.OneCycleLR(o, 0.1, total_steps=10, anneal_strategy="exp"), r"^\[OneCycleLR\] anneal_strategy"),
    (lambda o: EL.OneCycleLR(o, 0.1, total_steps=10, pct_start=1.5), r"^\[OneCycleLR\] pct_start"),
    (lambda o: EL.OneCycleLR(o, [0.1], total_steps=10), r"^\[OneCycleLR\] expected 2 values of max_lr"),
    (lambda o: EL.SequentialLR(o, [], []), r"^\[SequentialLR\] expects at least one scheduler"),
    (lambda o: EL.SequentialLR(o, [EL.StepLR(o, 2)], [3]), r"^\[SequentialLR\] expects 0 milestones"),
    (lambda o: EL.SequentialLR(o, [EL.StepLR(_pair()[0], 2)], []), r"^\[SequentialLR\] schedulers\[0\] drives another"),
    (lambda o: EL.SequentialLR(o, [3], []), r"^\[SequentialLR\] schedulers\[0\] is a int"),
])
def test_errors(make, match):
    with pytest.raises(em.EmberError, match=match):
        make(_pair()[0])


def test_one_cycle_past_its_end_and_without_momentum():
    eo, _ = _pair()
    s = EL.OneCycleLR(eo, 0.1, total_steps=3)
    for _ in range(2):
        s.step()
    s.step()  # step 3 == total_steps is still allowed, as torch
    with pytest.raises(em.EmberError, match=r"^\[OneCycleLR\] tried to step 4 times; total_steps is 3"):
        s.step()
    with pytest.raises(em.EmberError, match=r"^\[OneCycleLR\] cycle_momentum needs"):
        EL.OneCycleLR(_NoMomentum(), 0.1, total_steps=3)
    assert EL.OneCycleLR(_NoMomentum(), 0.1, total_steps=30, cycle_momentum=False).get_last_lr() == pytest.approx([0.1 / 25.0], rel=1e-15)


class _NoMomentum(em.optim.Optimizer):
    """An optimizer with neither momentum nor betas (OneCycleLR's cycle_momentum cannot run on it)."""

    name = "NoMomentum"

    def __init__(self):
        super().__init__([em.Var([1.0])], {"lr": 0.1})
