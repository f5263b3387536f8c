"""Model outputs and input batches as trees: a tensor, or tuples, lists, named tuples and dicts (a Hugging Face
ModelOutput or BatchEncoding included) of tensors and other values. flatten() lists the tensors; rebuild() puts
new ones in their places."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class Tree:
    """Where each tensor sat: kind ('leaf', 'value', 'tuple', 'list', 'dict'), the container type, dict keys and
    children. 'value' is a non-tensor kept as it was."""
    kind: str
    type: Any = None
    keys: tuple = ()
    children: tuple = ()
    value: Any = None

    def values(self) -> list:
        """The non-tensor values, in order (a batch's own: they travel with it)."""
        if self.kind == "value":
            return [self.value]
        return [v for c in self.children for v in c.values()]

    def signature(self) -> tuple:
        """The structure without the non-tensor values: two batches of one program compare equal."""
        return (self.kind, self.type, self.keys, tuple(c.signature() for c in self.children))


def flatten(obj) -> tuple[list[torch.Tensor], Tree]:
    """The tensors of obj in a fixed order, and the tree to rebuild it."""
    leaves: list[torch.Tensor] = []
    return leaves, _walk(obj, leaves)


def _walk(obj, leaves: list) -> Tree:
    if isinstance(obj, torch.Tensor):
        leaves.append(obj)
        return Tree("leaf")
    if isinstance(obj, Mapping):
        keys = tuple(obj.keys())
        return Tree("dict", type(obj), keys, tuple(_walk(obj[k], leaves) for k in keys))
    if isinstance(obj, (tuple, list)):
        return Tree("tuple" if isinstance(obj, tuple) else "list", type(obj), (),
                    tuple(_walk(x, leaves) for x in obj))
    return Tree("value", value=obj)


def rebuild(tree: Tree, leaves: list, values: list | None = None) -> Any:
    """obj again, with `leaves` in the tensors' places (same order as flatten()) and `values` (default: the tree's
    own) in the other values' places."""
    return _build(tree, iter(leaves), iter(tree.values() if values is None else values))


def _build(tree: Tree, it, values) -> Any:
    if tree.kind == "leaf":
        return next(it)
    if tree.kind == "value":
        return next(values)
    items = [_build(c, it, values) for c in tree.children]
    if tree.kind == "dict":
        return _make(tree.type, dict(zip(tree.keys, items)), dict)
    if tree.kind == "tuple" and hasattr(tree.type, "_fields"):  # a named tuple
        return tree.type(*items)
    return _make(tree.type, items, tuple if tree.kind == "tuple" else list)


def _make(kind, items, fallback: Callable):
    try:
        return kind(items)
    except Exception:  # a container type that cannot be built from its items: the plain one
        return fallback(items)


def map_tensors(obj, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """obj with fn applied to every tensor in it."""
    leaves, tree = flatten(obj)
    return rebuild(tree, [fn(t) for t in leaves])
