"""ember's exception classes; the C++ core raises these through ember._C's translator."""


class EmberError(Exception):
    """Base class of every error ember raises on bad input. Messages start with ``[op]``."""


class EmberValueError(EmberError, ValueError):
    """A bad value (for example a negative size)."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit together."""


class DTypeError(EmberError, TypeError):
    """A dtype the op cannot take, or two operands whose dtypes differ."""


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
