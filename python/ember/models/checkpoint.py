"""Reading Hugging Face checkpoint directories: config.json, model.safetensors or a sharded index."""
from __future__ import annotations

import json
import os

from ..errors import EmberIOError, EmberValueError
from ..io import load_safetensors

__all__ = ["read_config", "read_state"]


def read_config(path, op: str) -> dict:
    """The parsed ``config.json`` of a checkpoint directory.

    Args:
        path: the directory.
        op: the op name for error messages.

    Returns:
        dict: the configuration.

    Raises:
        EmberIOError: the directory or its config.json is missing or unreadable.
        EmberValueError: config.json is not a JSON object.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise EmberIOError(f"[{op}] {path!r} is not a checkpoint directory")
    cfg_path = os.path.join(path, "config.json")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise EmberIOError(f"[{op}] {path!r} has no config.json") from None
    except (OSError, ValueError) as e:
        raise EmberIOError(f"[{op}] cannot read {cfg_path!r}: {e}") from None
    if not isinstance(cfg, dict):
        raise EmberValueError(f"[{op}] {cfg_path!r} must hold a JSON object")
    return cfg


def read_state(path, op: str, device=None) -> dict:
    """Every tensor of a checkpoint directory: ``model.safetensors``, or the shards that
    ``model.safetensors.index.json`` lists (its ``weight_map``), each read by ``load_safetensors``
    (with its checks of hostile files).

    Args:
        path: the directory.
        op: the op name for error messages.
        device: where the tensors go.

    Returns:
        dict: ``{name: Tensor}`` with the checkpoint's own names.

    Raises:
        EmberIOError: no weights file, a shard outside the directory, or a tensor the index names is
            missing from its shard.
        EmberValueError: a malformed index.
    """
    path = os.fspath(path)
    single = os.path.join(path, "model.safetensors")
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(single):
        return load_safetensors(single, device=device)
    if not os.path.isfile(index):
        raise EmberIOError(f"[{op}] {path!r} has neither model.safetensors nor model.safetensors.index.json "
                           "(only the safetensors format is read; never pickle)")
    try:
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map")
    except (OSError, ValueError, AttributeError) as e:
        raise EmberValueError(f"[{op}] cannot read the shard index {index!r}: {e}") from None
    if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in weight_map.items()):
        raise EmberValueError(f"[{op}] {index!r} has no weight_map of tensor name -> shard file")
    state = {}
    root = os.path.realpath(path)
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.realpath(os.path.join(path, shard))
        if os.path.dirname(shard_path) != root:  # an index must not reach files outside its directory
            raise EmberIOError(f"[{op}] shard {shard!r} lies outside {path!r}")
        state.update(load_safetensors(shard_path, device=device))
    missing = [k for k in weight_map if k not in state]
    if missing:
        raise EmberIOError(f"[{op}] the index names tensors its shards lack: {missing[:5]}")
    return state
