"""ember.testing: gradcheck (finite differences) and check_op (an opcheck for custom ops)."""
from .gradcheck import GradcheckError, gradcheck
from .opcheck import CheckOpError, CheckOpReport, check_op

__all__ = ["CheckOpError", "CheckOpReport", "GradcheckError", "check_op", "gradcheck"]
