"""Which captured containers a function's code mutates in place.

A captured list or dict that holds dynamic leaves is rebuilt around them when
the function is rebuilt: code that appends to it, sets an item or calls a
mutating method would change that copy, not the user's container, so lift
refuses it when it lifts. The bytecode is read once per code object, with the
code objects nested in it (inner functions, lambdas, comprehensions), for the
patterns a mutation compiles to on CPython 3.11 to 3.13: a load of the
variable followed by a mutating method (`x.append`, `x.update`, ...) or by one
plain load and an item store or deletion (`x[k] = v`, `del x[k]`).
"""

from __future__ import annotations

import dis
import threading
import types
import weakref
from typing import Final, cast

__all__ = ["mutated_names"]

# Methods of `list`, `dict` and `set` that change the container.
_MUTATORS: Final = frozenset(
    {
        "append",
        "extend",
        "insert",
        "pop",
        "remove",
        "clear",
        "sort",
        "reverse",
        "update",
        "setdefault",
        "popitem",
        "add",
        "discard",
        "__setitem__",
        "__delitem__",
        "__iadd__",
        "__ior__",
    }
)
_VARIABLE_LOADS: Final = frozenset(
    {"LOAD_DEREF", "LOAD_FAST", "LOAD_CLASSDEREF", "LOAD_FAST_CHECK"}
)
# Loads that may stand between the container and its item store (the key).
_PLAIN_LOADS: Final = frozenset(
    {
        "LOAD_FAST",
        "LOAD_FAST_CHECK",
        "LOAD_DEREF",
        "LOAD_CONST",
        "LOAD_GLOBAL",
        "LOAD_NAME",
    }
)
_ITEM_WRITES: Final = frozenset({"STORE_SUBSCR", "DELETE_SUBSCR"})

# Keyed by `id(code)`, holding the code weakly: an entry is dropped with it.
_cache: dict[int, tuple[weakref.ref[types.CodeType], frozenset[str]]] = {}
_lock = threading.Lock()


def mutated_names(code: types.CodeType) -> frozenset[str]:
    """The variables (free variables and parameters) whose value `code`, or code
    nested in it, mutates in place."""
    entry = _cache.get(id(code))
    if entry is not None and entry[0]() is code:
        return entry[1]
    names = frozenset(_scan(code))
    key = id(code)

    def forget(_: object) -> None:
        with _lock:
            if (old := _cache.get(key)) is not None and old[0]() is None:
                del _cache[key]

    with _lock:
        _cache[key] = (weakref.ref(code, forget), names)
    return names


def _parameters(code: types.CodeType) -> frozenset[str]:
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kw
    return frozenset(code.co_varnames[:count])


def _scan(code: types.CodeType) -> set[str]:
    """Captured names `code` mutates: its free variables and parameters (what
    lift captures as cells and defaults), and in nested code the free variables
    that are those (not the enclosing code's own locals)."""
    found: set[str] = set()
    todo = [(code, frozenset(code.co_freevars) | _parameters(code))]
    while todo:  # iteratively, nested code included
        c, captured = todo.pop()
        todo.extend(
            (k, captured & frozenset(k.co_freevars))
            for k in c.co_consts
            if type(k) is types.CodeType
        )
        instructions = [i for i in dis.get_instructions(c) if i.opname != "CACHE"]
        for n, ins in enumerate(instructions):
            loaded = _loaded(ins)
            if not loaded or not captured.intersection(loaded):
                continue
            after = instructions[n + 1 : n + 3]
            if not after:
                continue
            nxt = after[0]
            if nxt.opname in ("LOAD_ATTR", "LOAD_METHOD") and _attr(nxt) in _MUTATORS:
                found.add(loaded[-1])
            elif nxt.opname in _ITEM_WRITES and len(loaded) == 2:
                found.add(loaded[0])  # 3.13: `x[k]` as one superinstruction
            elif (
                nxt.opname in _PLAIN_LOADS
                and len(after) == 2
                and after[1].opname in _ITEM_WRITES
            ):
                found.add(loaded[-1])
    return found & (frozenset(code.co_freevars) | _parameters(code))


def _loaded(ins: dis.Instruction) -> tuple[str, ...]:
    """The variables an instruction loads, in order (two for 3.13's
    `LOAD_FAST_LOAD_FAST`)."""
    if ins.opname in _VARIABLE_LOADS and type(ins.argval) is str:
        return (ins.argval,)
    value: object = ins.argval
    if ins.opname == "LOAD_FAST_LOAD_FAST" and isinstance(value, tuple):
        return tuple(map(str, cast("tuple[object, ...]", value)))
    return ()


def _attr(ins: dis.Instruction) -> str:
    # 3.12+ folds `LOAD_METHOD` into `LOAD_ATTR`, whose `argval` is the name.
    return str(ins.argval)
