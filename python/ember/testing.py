"""ember.testing: gradcheck (finite differences) and check_op (an opcheck for custom ops)."""
from .gradcheck import GradcheckError, gradcheck  # noqa: F401
from .opcheck import CheckOpError, check_op  # noqa: F401
