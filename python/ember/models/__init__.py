"""em.models: Hugging Face causal language models (Llama, GPT-2) as ordinary em.nn Modules."""
from .gpt2 import GPT2
from .llama import Llama

__all__ = ["GPT2", "Llama"]
