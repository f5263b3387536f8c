"""Frozen dataclasses to JSON and back, by one set of rules, driven by the classes' fields and type hints:
to_json(value) -> JSON-able, from_json(cls, data) -> cls. The analysis document's types (result.Document and the types
it holds, each beside the code that makes its object) are read and written by these alone.

The rules:
- a dataclass is a JSON object, its fields the keys in their order; reading one, a key that is not a field is an
  error naming its path (a renamed field fails loudly, never dropped), and so is a missing key.
- a key the JSON sometimes leaves out (absent, not null) is a field `x: T | Absent = ABSENT`: ABSENT where the key
  is missing, and left out again when written.
- a field that is not in the JSON says so in its metadata (`field(default=..., metadata=NOT_IN_JSON)`).
- a field named after a Python keyword with `_` after it is that keyword's key (`async_` is `async`).
- `X | None` is null or X; `tuple[X, ...]` a JSON list (tuples keep the values immutable), `tuple[X, Y]` a list of
  those two; `dict[str, X]` an open map whose keys are data (counts by name); str, int, float and bool stay as they
  are (an int under float stays an int, as JSON wrote it: the round trip is exact), checked on reading.
- a class with a JSON form of its own (its field names or layout differ from the JSON's) defines `__to_json__(self)`
  and the classmethod `__from_json__(cls, data)`, which are used instead.
"""
from __future__ import annotations

import dataclasses
import keyword
import types
import typing
from functools import cache
from typing import Any

__all__ = ["ABSENT", "Absent", "NOT_IN_JSON", "JsonShapeError", "to_json", "from_json", "known_keys"]


class Absent:
    """The value of a field whose key the JSON left out (ABSENT, the one instance): not null, not there."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = Absent()
NOT_IN_JSON = {"json": False}


class JsonShapeError(ValueError):
    """JSON whose shape is not the type's: an unknown or missing key, a value of another type (the path says where)."""


@cache
def _fields(cls: type) -> tuple[tuple[str, str, Any, bool], ...]:
    """(field name, JSON key, type, may be absent) of each field in the JSON, in order."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _key(f.name), hints[f.name], f.default is ABSENT) for f in dataclasses.fields(cls)
                 if f.metadata.get("json", True))


def _key(name: str) -> str:
    return name[:-1] if name.endswith("_") and keyword.iskeyword(name[:-1]) else name


def to_json(value: Any) -> Any:
    """The value as JSON-able data (dicts, lists, primitives), by the rules above."""
    if hasattr(value, "__to_json__"):
        return value.__to_json__()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {key: to_json(v) for name, key, _, _ in _fields(type(value))
                if (v := getattr(value, name)) is not ABSENT}
    if isinstance(value, (tuple, list)):
        return [to_json(x) for x in value]
    if isinstance(value, dict):
        return {k: to_json(x) for k, x in value.items()}
    return value


def from_json(cls: Any, data: Any, path: str = "$") -> Any:
    """data read as cls (a dataclass, or any type the rules above name); JsonShapeError where it does not fit."""
    origin, args = typing.get_origin(cls), typing.get_args(cls)
    if origin in (typing.Union, types.UnionType):
        return _union(args, data, path)
    if origin is tuple:
        _expect(data, list, cls, path)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], x, f"{path}[{i}]") for i, x in enumerate(data))
        if len(data) != len(args):
            raise JsonShapeError(f"{path}: {len(data)} items where {cls} holds {len(args)}")
        return tuple(from_json(a, x, f"{path}[{i}]") for i, (a, x) in enumerate(zip(args, data)))
    if origin is dict:
        _expect(data, dict, cls, path)
        return {k: from_json(args[1], x, f"{path}.{k}") for k, x in data.items()}
    if cls is Any:
        return data
    if hasattr(cls, "__from_json__"):
        return cls.__from_json__(data)
    if dataclasses.is_dataclass(cls):
        return _object(cls, data, path)
    if cls in (str, int, float, bool):
        ok = isinstance(data, (int, float) if cls is float else cls) and (cls is bool or not isinstance(data, bool))
        if not ok:
            raise JsonShapeError(f"{path}: {data!r} is not a {cls.__name__}")
        return data
    raise TypeError(f"{path}: no JSON rule for {cls!r} (analysis/common/typed_json.py)")


def known_keys(data: Any, keys: tuple[str, ...], owner: str) -> dict:
    """data, checked to be an object with these keys exactly (for a __from_json__ of a class's own JSON form)."""
    if not isinstance(data, dict) or set(data) != set(keys):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise JsonShapeError(f"{owner}: the keys {list(keys)} expected, got {got}")
    return data


def _object(cls: type, data: Any, path: str) -> Any:
    _expect(data, dict, cls, path)
    spec = _fields(cls)
    unknown = [k for k in data if k not in {key for _, key, _, _ in spec}]
    if unknown:
        raise JsonShapeError(f"{path}: {cls.__name__} has no field {unknown[0]!r} (its fields: "
                             f"{', '.join(key for _, key, _, _ in spec)})")
    values = {}
    for name, key, tp, may_be_absent in spec:
        if key in data:
            values[name] = from_json(tp, data[key], f"{path}.{key}")
        elif not may_be_absent:
            raise JsonShapeError(f"{path}: {cls.__name__}'s key {key!r} is missing")
    return cls(**values)


def _union(args: tuple, data: Any, path: str) -> Any:
    options = [a for a in args if a is not Absent]
    if data is None and type(None) in options:
        return None
    options = [a for a in options if a is not type(None)]
    if len(options) == 1:
        return from_json(options[0], data, path)
    for a in options:  # a union of several types: the first that reads it
        try:
            return from_json(a, data, path)
        except JsonShapeError:
            continue
    raise JsonShapeError(f"{path}: {data!r} is none of {options}")


def _expect(data: Any, kind: type, cls: Any, path: str) -> None:
    if not isinstance(data, kind):
        raise JsonShapeError(f"{path}: a {kind.__name__} expected for {getattr(cls, '__name__', cls)}, got "
                             f"{type(data).__name__}")
