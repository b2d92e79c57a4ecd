"""The types whose values hold nothing are stated once (`lift._base.atoms`): every
walk's set of them is the base set's, with named additions and removals."""

from __future__ import annotations

import types

import jax
import numpy as np

from lift._base import atoms as _atoms
from lift._holders import stdlib as _stdlib_holders
from lift._holders.trees import _ATOMS as TREE_ATOMS  # pyright: ignore[reportPrivateUsage]
from lift._leaks import frames as _frame_look, objects as _leak_objects
from lift._rule import hidden as _hidden, static as _static


def test_the_base_sets_are_stated_from_each_other() -> None:
    assert _atoms.EXACT | _atoms.INEXACT == _atoms.SCALARS
    assert not _atoms.EXACT & _atoms.INEXACT
    assert _atoms.SCALARS < _atoms.HOLD_NOTHING < _atoms.UNOPENED
    assert _atoms.INTERPRETER < _atoms.UNOPENED
    assert not _atoms.HOLD_NOTHING & _atoms.INTERPRETER


def test_each_walk_derives_its_set_from_the_base() -> None:
    # The leak scan, and the frame look (by subclass, and with classes, NumPy
    # scalars and JAX's arrays besides).
    # Tracebacks, frames and slices are opened through their readers.
    opened = _stdlib_holders.OPENED_BY_SCANS
    assert _atoms.UNOPENED - opened == _leak_objects.SCAN_UNOPENED
    assert set(_frame_look._NOT_LOOKED_AT) == (_atoms.UNOPENED - opened) | {  # pyright: ignore[reportPrivateUsage]
        type,
        np.generic,
        jax.Array,
    }
    # The parts of a C object, an object array, a cache. (The hidden-tracer
    # scan is the leak scan's walk: `lift._leaks.scan.first_tracer`.)
    assert _stdlib_holders.HOLD_NOTHING is _atoms.HOLD_NOTHING
    # The static rule: the exact scalars compared by value, the
    # inexact ones leaves.
    assert _static._PLAIN == _atoms.EXACT  # pyright: ignore[reportPrivateUsage]
    assert (
        _atoms.EXACT
        | {
            type(Ellipsis),
            type,
            types.ModuleType,
            np.dtype,
        }
        == _static.STATIC_ATOMS
    )
    assert _atoms.INEXACT | {_static.ArrayImpl} == _static.ALWAYS_DYNAMIC
    assert _static.ALWAYS_DYNAMIC | {np.ndarray} == _static.DYNAMIC_ATOMS
    assert not _static.STATIC_ATOMS & _static.DYNAMIC_ATOMS
    # Static captures the hidden-tracer scan passes by: by exact type, and by
    # subclass (`opaque`).
    assert _atoms.EXACT | {type(Ellipsis)} == _static._UNSCANNED  # pyright: ignore[reportPrivateUsage]
    assert set(_hidden._OPAQUE_SKIP) >= _atoms.SCALARS  # pyright: ignore[reportPrivateUsage]
    # Never a pytree node: the scalars and functions.
    assert _atoms.SCALARS | {types.FunctionType} == TREE_ATOMS


def test_what_holds_nothing_holds_no_object() -> None:
    import gc

    for value in (None, True, 1, 1.5, 2j, "s", b"b", ..., NotImplemented):
        assert type(value) in _atoms.HOLD_NOTHING
        assert not gc.get_referents(value)
    assert type(range(3)) in _atoms.HOLD_NOTHING
    assert type(bytearray(b"x")) in _atoms.HOLD_NOTHING
    assert not gc.is_tracked(bytearray(b"x"))
