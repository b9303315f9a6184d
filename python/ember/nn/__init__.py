"""ember.nn: fused ops (``ember.nn.ops``) and layers."""
from . import ops  # noqa: F401
