"""Tensors over the storages _C kernels return: how op modules (nn included) wrap a result without
reaching into the Tensor module's internals."""
from __future__ import annotations

from .tensor_type import Tensor, _contig, _wrap

__all__ = ["dense", "dense_like", "from_kernel"]


def from_kernel(storage, layout, dtype, device) -> Tensor:
    """A plain (unrecorded) tensor over ``storage`` seen through ``layout`` (a ``_C.Layout``)."""
    return _wrap(storage, layout, dtype, device)


def dense(storage, shape, dtype, device) -> Tensor:
    """A plain (unrecorded) tensor over a new dense storage of ``shape``."""
    shape = tuple(shape)
    return _wrap(storage, _contig(shape), dtype, device, None, shape)


def dense_like(storage, shape, like: Tensor) -> Tensor:
    """A plain (unrecorded) tensor over a new dense storage of ``shape``, typed and placed like ``like``."""
    return dense(storage, shape, like._dtype, like._device)
