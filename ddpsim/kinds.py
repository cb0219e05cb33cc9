"""What kind of value a declared field holds, checked and said in words: a dataclass's annotations read
with ``typing`` (``kinds``), a value tested against one (``kind_of``: a real bool for a bool, a finite number
for a float, a non-empty string for a str, a list's items and a dict's keys and values of theirs), the kind
in words for an error message (``kind_text``) and the value as JSON shows it (``shown``). Used where a file
ddpsim reads holds a config: a simulated trace's ``meta.config`` (``learn/gpu_model.py``) and
``SimConfig.validate``; ``shown`` by the profile import's messages too.
"""
from __future__ import annotations

import functools
import json
import math
import numbers
import re
import types
import typing


@functools.cache
def kinds(cls) -> dict:
    """A dataclass's fields -> their declared types, as ``typing`` reads the annotations."""
    return typing.get_type_hints(cls)


def kind_of(value, kind, finite: bool = True) -> bool:
    """Whether ``value`` is of the declared ``kind``: a bool only for a bool, an integer (not a bool) for an
    int, a number (not a bool; ``finite``: finite) for a float, a non-empty string for a str; a list's items
    and a dict's keys and values of their kinds (an int key as JSON writes it, a string, too)."""
    if isinstance(kind, types.UnionType):
        return any(kind_of(value, k, finite) for k in typing.get_args(kind))
    if kind is bool:
        return isinstance(value, bool)
    if kind is type(None):
        return value is None
    if kind in (int, float):  # numpy's numbers too
        return (isinstance(value, numbers.Real if kind is float else numbers.Integral) and not isinstance(value, bool)
                and (not finite or math.isfinite(value)))
    if kind is str:
        return isinstance(value, str) and value != ""
    base, args = typing.get_origin(kind) or kind, typing.get_args(kind)
    if base is list:
        return isinstance(value, (list, tuple)) and all(kind_of(v, args[0], finite) for v in value if args)
    if base is dict:
        return isinstance(value, dict) and all(_key_of(k, args[0]) and kind_of(v, args[1], finite)
                                               for k, v in value.items() if args)
    return isinstance(value, base)


def _key_of(key, kind) -> bool:
    if kind is int and isinstance(key, str):  # JSON's object keys are strings
        return re.fullmatch(r"-?[0-9]+", key) is not None
    return kind_of(key, kind)


NOUNS = {bool: ("true or false", "trues or falses"), int: ("an integer", "integers"),  # a kind: (one, several)
         str: ("a non-empty string", "strings"), float: ("a finite number", "finite numbers"),
         type(None): ("null", "nulls"), list: ("a list", "lists"), dict: ("an object", "objects")}


def kind_text(kind, plural: bool = False) -> str:
    """``kind`` in words: "a finite number or null", "an object of integers (as keys) to finite numbers"."""
    if isinstance(kind, types.UnionType):
        return " or ".join(kind_text(k, plural) for k in typing.get_args(kind))
    base, args = typing.get_origin(kind) or kind, typing.get_args(kind)
    noun = NOUNS[base][plural]
    if base is list and args:
        return f"{noun} of {kind_text(args[0], True)}"
    if base is dict and args:
        return f"{noun} of {kind_text(args[0], True)} (as keys) to {kind_text(args[1], True)}"
    return noun


def shown(value, most: int = 60) -> str:
    """``value`` as JSON wrote it, cut after ``most`` characters."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= most else text[:most - 3] + "..."
