"""ember's exception classes; the C++ core raises these through ember._C's translator."""


class EmberError(Exception):
    """Base class of every error ember raises on bad input. Messages start with ``[op]``."""


class EmberValueError(EmberError, ValueError):
    """A bad value (for example a negative size)."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit together."""


class DTypeError(EmberError, TypeError):
    """A dtype the op cannot take, or two operands whose dtypes differ."""


class EmberTypeError(EmberError, TypeError):
    """A value of the wrong Python type: a list where a Tensor is expected, a string for a number, a
    float for a dim, len() of a 0-d tensor. Dtype problems raise DTypeError instead."""


class DeviceError(EmberError, ValueError):
    """Operands on different devices, or a device this build cannot use."""


class IndexOutOfRange(EmberError, IndexError):
    """A dim or index out of range."""


class OutOfMemory(EmberError, MemoryError):
    """An allocation that the machine cannot satisfy (the size is in the message)."""


class EmberIOError(EmberError, OSError):
    """A file ember cannot read (missing, unreadable, or not a regular file). ``errno`` and
    ``filename`` are set as on the ``OSError`` it replaces."""

    def __str__(self):
        # OSError's own __str__ would format "[Errno n] ..." once errno is set: keep the "[op]" message.
        return str(self.args[0]) if self.args else super().__str__()


class UnsupportedOp(EmberError, NotImplementedError):
    """An op that has no implementation for these arguments."""


class BackwardNotSupported(EmberError, NotImplementedError):
    """Backward reached an op that has no gradient rule. ``.op`` names the op."""

    def __init__(self, op, message=None):
        """Args: ``op``, the op's name; ``message``, the text (default: "[op] backward is not supported")."""
        self.op = op
        super().__init__(message or f"[{op}] backward is not supported for {op}")


class InplaceModifiedError(EmberError, RuntimeError):
    """A tensor saved for backward was modified in place after it was saved."""


class DLPackCopyWarning(UserWarning):
    """``em.from_dlpack`` of a dtype ember lacks (int8, int16, uint16): the data is copied and
    widened (to int64), so the result shares no memory with the producer."""


class GradientsInStore(EmberError, AttributeError):
    """A torch gradient name (``t.grad``, ``requires_grad=True``, ``opt.zero_grad()``, ``opt.step()``)
    that ember spells differently: gradients come back from ``loss.backward()`` in a GradStore
    (``g[v]``), and ``opt.step(g)`` / ``opt.backward_step(loss)`` apply them."""


class NoGradientPath(EmberError, RuntimeError):
    """``backward()`` on a result that depends on no variable (made from constants, or under
    ``no_grad``), as torch's "element 0 of tensors does not require grad"."""
