"""Learning-rate schedules with torch.optim.lr_scheduler's names, arguments and exact lr sequences."""
from __future__ import annotations

import bisect
import math
import types

from ..args import bool_arg, float_arg, int_arg
from ..errors import EmberTypeError, EmberValueError
from .optimizer import Optimizer

__all__ = [
    "ConstantLR", "CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR", "LinearLR", "MultiStepLR",
    "OneCycleLR", "SequentialLR", "StepLR",
]


class LRScheduler:
    """Base class: sets each param group's ``lr`` once at construction (step 0) and at each ``step()``.

    Each schedule computes the next lr from the current one with torch's recurrences (the same float
    operations in the same order), so the sequence equals torch's exactly. Call ``step()`` after
    ``opt.step(grads)``. ``get_last_lr()`` gives the lrs last set; ``state_dict()`` (plain values, so
    ``em.save`` writes it) and ``load_state_dict()`` resume a schedule.

    Args:
        optimizer: the ``em.optim`` optimizer whose groups' ``lr`` this schedules.
        last_epoch: the index of the last step taken; -1 starts a schedule (and records each group's
            ``initial_lr``), a larger value resumes one whose groups already have ``initial_lr``.
    """

    name = "LRScheduler"

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise EmberTypeError(f"[{self.name}] expects an em.optim optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        last_epoch = int_arg(last_epoch, self.name, "last_epoch")
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise EmberValueError(f"[{self.name}] param_groups[{i}] has no 'initial_lr' to resume from "
                                          f"last_epoch={last_epoch}: load the optimizer's state first")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        """The lrs for the current ``last_epoch``, computed from the groups' current lrs."""
        raise NotImplementedError

    def get_last_lr(self) -> list:
        """The lr of each param group as last set by this schedule (a list of floats)."""
        return self._last_lr

    def step(self) -> None:
        """Advances the schedule one step and writes the new lrs into the optimizer's groups."""
        self._step_count += 1
        self._update_lr(None)

    def _update_lr(self, epoch):
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:  # SequentialLR restarting a schedule at a milestone: torch's closed form where there is one
            self.last_epoch = epoch
            closed = getattr(self, "_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _group_lrs(self):
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """The schedule's state: every attribute but the optimizer, as plain values (``em.save`` writes it)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state saved by ``state_dict``.

        Args:
            state_dict: the dict ``state_dict()`` returned (or ``em.load`` read back).
        """
        if not isinstance(state_dict, dict):
            raise EmberTypeError(f"[{self.name}] load_state_dict expects the dict from state_dict(), got "
                                 f"{type(state_dict).__name__}")
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "optimizer"})

    def __repr__(self):
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self.get_last_lr()})"


class StepLR(LRScheduler):
    """Multiplies each group's lr by ``gamma`` every ``step_size`` steps.

    Args:
        optimizer: the optimizer.
        step_size: the period of the decay, in steps.
        gamma: the factor.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "StepLR"

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size = int_arg(step_size, "StepLR", "step_size")
        if self.step_size <= 0:
            raise EmberValueError(f"[StepLR] step_size must be positive, got {self.step_size}")
        self.gamma = float_arg(gamma, "StepLR", "gamma")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The next lrs: the current ones, times ``gamma`` at each multiple of ``step_size``."""
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._group_lrs()
        return [lr * self.gamma for lr in self._group_lrs()]

    def _closed_form_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiplies each group's lr by ``gamma`` at each milestone (a milestone listed twice, twice).

    Args:
        optimizer: the optimizer.
        milestones: the steps at which to decay (ints).
        gamma: the factor.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "MultiStepLR"

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        if isinstance(milestones, (str, bytes)) or not hasattr(milestones, "__iter__"):
            raise EmberTypeError(f"[MultiStepLR] milestones must be a list of ints, got {type(milestones).__name__}")
        counts = {}
        for m in milestones:
            m = int_arg(m, "MultiStepLR", "a milestone")
            counts[m] = counts.get(m, 0) + 1
        self.milestones = dict(sorted(counts.items()))  # step -> how many times it is listed
        self.gamma = float_arg(gamma, "MultiStepLR", "gamma")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The next lrs: the current ones, times ``gamma ** count`` at a milestone."""
        n = self.milestones.get(self.last_epoch)
        if n is None:
            return self._group_lrs()
        return [lr * self.gamma ** n for lr in self._group_lrs()]

    def _closed_form_lr(self):
        ms = sorted(m for m, n in self.milestones.items() for _ in range(n))
        return [b * self.gamma ** bisect.bisect_right(ms, self.last_epoch) for b in self.base_lrs]

    def load_state_dict(self, state_dict):
        """Restores a state saved by ``state_dict`` (milestone keys read back as ints).

        Args:
            state_dict: the dict ``state_dict()`` returned.
        """
        super().load_state_dict(state_dict)
        self.milestones = {int(k): int(v) for k, v in self.milestones.items()}


class ExponentialLR(LRScheduler):
    """Multiplies each group's lr by ``gamma`` every step.

    Args:
        optimizer: the optimizer.
        gamma: the factor.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "ExponentialLR"

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = float_arg(gamma, "ExponentialLR", "gamma")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The next lrs: the current ones times ``gamma`` (unchanged at construction)."""
        if self._is_initial:
            return self._group_lrs()
        return [lr * self.gamma for lr in self._group_lrs()]

    def _closed_form_lr(self):
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from each group's initial lr down to ``eta_min`` over ``T_max`` steps, then
    back up (torch's recurrence, without restarts).

    Args:
        optimizer: the optimizer.
        T_max: the number of steps of half a period.
        eta_min: the lowest lr.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "CosineAnnealingLR"

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803  (torch's name)
        self.T_max = int_arg(T_max, "CosineAnnealingLR", "T_max")
        if self.T_max <= 0:
            raise EmberValueError(f"[CosineAnnealingLR] T_max must be positive, got {self.T_max}")
        self.eta_min = float_arg(eta_min, "CosineAnnealingLR", "eta_min")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The next lrs by torch's cosine recurrence on the current ones."""
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._group_lrs()
        if self._step_count == 1 and e > 0:  # resumed: the closed form
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / T)) / 2 for b in self.base_lrs]
        if (e - 1 - T) % (2 * T) == 0:
            return [lr + (b - lo) * (1 - math.cos(math.pi / T)) / 2 for b, lr in zip(self.base_lrs, self._group_lrs())]
        return [(1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (lr - lo) + lo
                for lr in self._group_lrs()]

    def _closed_form_lr(self):
        lo = self.eta_min
        return [lo + (b - lo) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2 for b in self.base_lrs]


class LinearLR(LRScheduler):
    """Scales each group's lr by a factor going linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` steps (the usual warmup: ``LinearLR(opt, 0.01, 1.0, warmup)``, then a decay through
    ``SequentialLR``).

    Args:
        optimizer: the optimizer.
        start_factor: the factor at step 0, in (0, 1].
        end_factor: the factor from ``total_iters`` on, in [0, 1].
        total_iters: the number of steps of the ramp.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "LinearLR"

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        self.start_factor = float_arg(start_factor, "LinearLR", "start_factor")
        self.end_factor = float_arg(end_factor, "LinearLR", "end_factor")
        if not 0 < self.start_factor <= 1.0:
            raise EmberValueError(f"[LinearLR] start_factor must be in (0, 1], got {self.start_factor}")
        if not 0 <= self.end_factor <= 1.0:
            raise EmberValueError(f"[LinearLR] end_factor must be in [0, 1], got {self.end_factor}")
        self.total_iters = int_arg(total_iters, "LinearLR", "total_iters")
        if self.total_iters <= 0:
            raise EmberValueError(f"[LinearLR] total_iters must be positive, got {self.total_iters}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The next lrs: the current ones times the ratio of this step's factor to the last one's."""
        s, f, n, e = self.start_factor, self.end_factor, self.total_iters, self.last_epoch
        if e == 0:
            return [lr * s for lr in self._group_lrs()]
        if self._is_initial or e > n:
            return self._group_lrs()
        return [lr * (1.0 + (f - s) / (n * s + (e - 1) * (f - s))) for lr in self._group_lrs()]

    def _closed_form_lr(self):
        s, f, n = self.start_factor, self.end_factor, self.total_iters
        return [b * (s + (f - s) * min(n, self.last_epoch) / n) for b in self.base_lrs]


class ConstantLR(LRScheduler):
    """Scales each group's lr by ``factor`` for the first ``total_iters`` steps (a constant warmup).

    Args:
        optimizer: the optimizer.
        factor: the factor, in [0, 1].
        total_iters: the number of steps it lasts.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "ConstantLR"

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        self.factor = float_arg(factor, "ConstantLR", "factor")
        if not 0 <= self.factor <= 1.0:
            raise EmberValueError(f"[ConstantLR] factor must be in [0, 1], got {self.factor}")
        self.total_iters = int_arg(total_iters, "ConstantLR", "total_iters")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The next lrs: times ``factor`` at step 0, divided back at ``total_iters``."""
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._group_lrs()]
        if self.last_epoch != self.total_iters:
            return self._group_lrs()
        return [lr * (1.0 / self.factor) for lr in self._group_lrs()]

    def _closed_form_lr(self):
        return [b * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)) for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """Sets each group's lr to its initial lr times ``lr_lambda(step)``.

    Args:
        optimizer: the optimizer.
        lr_lambda: a function of the step count, or a list with one per param group.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "LambdaLR"

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 0
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n:
            raise EmberValueError(f"[LambdaLR] expected {n} lr_lambdas (one per param group), got {len(fns)}")
        if not all(callable(f) for f in fns):
            raise EmberTypeError("[LambdaLR] lr_lambda must be a function of the step (or a list of them)")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        """The next lrs: ``initial_lr * lr_lambda(last_epoch)`` for each group."""
        return [b * fn(self.last_epoch) for fn, b in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        """The state; functions are not saved (None), callable objects' attributes are (as torch)."""
        sd = {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}
        sd["lr_lambdas"] = [None if isinstance(f, types.FunctionType) else dict(vars(f)) for f in self.lr_lambdas]
        return sd

    def load_state_dict(self, state_dict):
        """Restores a state saved by ``state_dict``; the functions stay those given to the constructor.

        Args:
            state_dict: the dict ``state_dict()`` returned.
        """
        sd = dict(state_dict)
        fns = sd.pop("lr_lambdas", [None] * len(self.lr_lambdas))
        super().load_state_dict(sd)
        for f, attrs in zip(self.lr_lambdas, fns):
            if attrs is not None:
                vars(f).update(attrs)


class SequentialLR(LRScheduler):
    """Runs ``schedulers`` one after the other, switching at each of ``milestones`` (torch's
    semantics: the next schedule restarts from step 0 there). Warmup then cosine decay::

        warm = LinearLR(opt, start_factor=0.01, total_iters=100)
        decay = CosineAnnealingLR(opt, T_max=900)
        sched = SequentialLR(opt, [warm, decay], milestones=[100])

    Args:
        optimizer: the optimizer every schedule in ``schedulers`` drives.
        schedulers: the schedules, built on ``optimizer``.
        milestones: the steps at which to switch, one fewer than ``schedulers``.
        last_epoch: -1 to start.
    """

    name = "SequentialLR"

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        schedulers, milestones = list(schedulers), [int_arg(m, "SequentialLR", "a milestone") for m in milestones]
        if not schedulers:
            raise EmberValueError("[SequentialLR] expects at least one scheduler")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler):
                raise EmberTypeError(f"[SequentialLR] schedulers[{i}] is a {type(s).__name__}, not a schedule")
            if s.optimizer is not optimizer:
                raise EmberValueError(f"[SequentialLR] schedulers[{i}] drives another optimizer")
        if len(milestones) != len(schedulers) - 1:
            raise EmberValueError(f"[SequentialLR] expects {len(schedulers) - 1} milestones for {len(schedulers)} "
                                  f"schedulers, got {len(milestones)}")
        self._schedulers, self._milestones = schedulers, milestones
        self.last_epoch = int_arg(last_epoch, "SequentialLR", "last_epoch") + 1
        self.optimizer = optimizer
        # Undo what each schedule's construction did, then start the first one afresh (as torch does).
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._undo(self)
        first = self._schedulers[bisect.bisect_right(milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def _undo(self, s):
        if isinstance(s, SequentialLR):
            for sub in s._schedulers:
                self._undo(sub)
        else:
            s.last_epoch -= 1

    def get_lr(self):
        """The lrs of the schedule now running."""
        return self._last_lr

    def step(self) -> None:
        """Steps the schedule whose turn it is (restarting it at its milestone)."""
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            s._update_lr(0)
        else:
            s.step()
        self._last_lr = s.get_last_lr()

    def state_dict(self):
        """The state, with each inner schedule's state."""
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state_dict):
        """Restores a state saved by ``state_dict``, the inner schedules' too.

        Args:
            state_dict: the dict ``state_dict()`` returned.
        """
        sd = dict(state_dict)
        inner = sd.pop("_schedulers", [])
        if len(inner) != len(self._schedulers):
            raise EmberValueError(f"[SequentialLR] load_state_dict: {len(inner)} schedules saved, this has "
                                  f"{len(self._schedulers)}")
        super().load_state_dict(sd)
        for s, st in zip(self._schedulers, inner):
            s.load_state_dict(st)


def _per_group(optimizer, name, value, op):
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise EmberValueError(f"[{op}] expected {len(optimizer.param_groups)} values of {name}, got {len(value)}")
        return [float_arg(v, op, name) for v in value]
    return [float_arg(value, op, name)] * len(optimizer.param_groups)


class OneCycleLR(LRScheduler):
    """The 1cycle policy: lr from ``max_lr / div_factor`` up to ``max_lr`` over ``pct_start`` of the
    steps, then down to ``initial_lr / final_div_factor``; the momentum (or Adam's beta1) cycles the
    other way between ``max_momentum`` and ``base_momentum``. Step it once per batch.

    Args:
        optimizer: the optimizer.
        max_lr: the peak lr (or one per group).
        total_steps: the number of steps of the cycle (or give ``epochs`` and ``steps_per_epoch``).
        epochs: with ``steps_per_epoch``, ``total_steps = epochs * steps_per_epoch``.
        steps_per_epoch: see ``epochs``.
        pct_start: the fraction of the cycle spent increasing the lr.
        anneal_strategy: ``"cos"`` or ``"linear"``.
        cycle_momentum: also cycle the momentum (SGD's ``momentum``, Adam's beta1).
        base_momentum: the lowest momentum (or one per group).
        max_momentum: the highest momentum (or one per group).
        div_factor: ``initial_lr = max_lr / div_factor``.
        final_div_factor: ``min_lr = initial_lr / final_div_factor``.
        three_phase: a third phase that anneals to ``min_lr`` after the symmetric up and down.
        last_epoch: -1 to start; see ``LRScheduler``.
    """

    name = "OneCycleLR"

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        op = "OneCycleLR"
        if not isinstance(optimizer, Optimizer):
            raise EmberTypeError(f"[{op}] expects an em.optim optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        if total_steps is not None:
            total = int_arg(total_steps, op, "total_steps")
        elif epochs is not None and steps_per_epoch is not None:
            total = int_arg(epochs, op, "epochs") * int_arg(steps_per_epoch, op, "steps_per_epoch")
            if epochs <= 0 or steps_per_epoch <= 0:
                raise EmberValueError(f"[{op}] epochs and steps_per_epoch must be positive")
        else:
            raise EmberValueError(f"[{op}] give total_steps, or epochs and steps_per_epoch")
        if total <= 0:
            raise EmberValueError(f"[{op}] total_steps must be positive, got {total}")
        self.total_steps = total
        pct = float_arg(pct_start, op, "pct_start")
        if not 0 <= pct <= 1:
            raise EmberValueError(f"[{op}] pct_start must be in [0, 1], got {pct}")
        if anneal_strategy not in ("cos", "linear"):
            raise EmberValueError(f"[{op}] anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self._anneal_func_type = anneal_strategy
        up = float(pct * total) - 1
        if bool_arg(three_phase, op, "three_phase"):
            self._schedule_phases = [
                {"end_step": up, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
                {"end_step": float(2 * pct * total) - 2, "start_lr": "max_lr", "end_lr": "initial_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
                {"end_step": total - 1, "start_lr": "initial_lr", "end_lr": "min_lr",
                 "start_momentum": "max_momentum", "end_momentum": "max_momentum"}]
        else:
            self._schedule_phases = [
                {"end_step": up, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
                {"end_step": total - 1, "start_lr": "max_lr", "end_lr": "min_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"}]
        max_lrs = _per_group(optimizer, "max_lr", max_lr, op)
        div, final_div = float_arg(div_factor, op, "div_factor"), float_arg(final_div_factor, op, "final_div_factor")
        if last_epoch == -1:
            for m, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = m / div
                group["max_lr"] = m
                group["min_lr"] = group["initial_lr"] / final_div
        self.cycle_momentum = bool_arg(cycle_momentum, op, "cycle_momentum")
        if self.cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise EmberValueError(f"[{op}] cycle_momentum needs an optimizer with a momentum or betas")
            self.use_beta1 = "betas" in optimizer.defaults
            maxm = _per_group(optimizer, "max_momentum", max_momentum, op)
            basem = _per_group(optimizer, "base_momentum", base_momentum, op)
            if last_epoch == -1:
                for mm, bm, group in zip(maxm, basem, optimizer.param_groups):
                    if self.use_beta1:
                        group["betas"] = (mm, *group["betas"][1:])
                    else:
                        group["momentum"] = mm
                    group["max_momentum"], group["base_momentum"] = mm, bm
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        """This step's lrs (and momenta, written into the groups) from the phase it falls in."""
        step = self.last_epoch
        if step > self.total_steps:
            raise EmberValueError(f"[OneCycleLR] tried to step {step} times; total_steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, ph in enumerate(self._schedule_phases):
                end = ph["end_step"]
                if step <= end or i == len(self._schedule_phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(group[ph["start_lr"]], group[ph["end_lr"]], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(group[ph["start_momentum"]], group[ph["end_momentum"]], pct)
                    break
                start = ph["end_step"]
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (mom, *group["betas"][1:])
                else:
                    group["momentum"] = mom
        return lrs
