"""ember.optim: optimizers with torch's update rules (SGD, Adam, AdamW, RMSprop) and ``lr_scheduler``."""
from . import lr_scheduler
from .optimizer import Optimizer
from .rules import SGD, Adam, AdamW, RMSprop

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "lr_scheduler"]
