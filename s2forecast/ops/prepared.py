"""Prepared attention state as a tree of tensors: flatten it into its tensors (which a layer
registers as buffers) and rebuild it from them.

A state is a tensor, a tuple (NamedTuples included), a list or a dataclass of states; any other
value (ints, floats, grids, None) is kept as it is.
"""

import dataclasses
from typing import Any, NamedTuple

import torch


class Slot(NamedTuple):
    """Placeholder for the tensor at position ``index`` of the flattened state."""

    index: int


def _map(state: Any, leaf) -> Any:
    if isinstance(state, torch.Tensor):
        return leaf(state)
    if isinstance(state, Slot):
        return leaf(state)
    if isinstance(state, tuple) and hasattr(state, "_fields"):
        return type(state)(*(_map(item, leaf) for item in state))
    if isinstance(state, tuple | list):
        return type(state)(_map(item, leaf) for item in state)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        changes = {f.name: _map(getattr(state, f.name), leaf) for f in dataclasses.fields(state) if f.init}
        return dataclasses.replace(state, **changes)
    return state


def flatten(state: Any) -> tuple[list[torch.Tensor], Any]:
    """The tensors of ``state`` in a fixed order, and its skeleton (tensors replaced by ``Slot``)."""
    tensors: list[torch.Tensor] = []

    def take(tensor):
        tensors.append(tensor)
        return Slot(len(tensors) - 1)

    return tensors, _map(state, take)


def unflatten(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """The state of ``skeleton`` with its slots filled from ``tensors`` (inverse of ``flatten``)."""
    return _map(skeleton, lambda slot: tensors[slot.index])


def to_device(state: Any, device) -> Any:
    """``state`` with every tensor on ``device`` (dtypes kept)."""
    return _map(state, lambda tensor: tensor.to(device))
