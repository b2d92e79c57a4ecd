"""Which captured containers a function's code mutates in place, and where.

A captured list or dict that holds dynamic leaves is rebuilt around them when
the function is rebuilt: code that appends to it, sets an item or calls a
mutating method would change that copy, not the user's container, so lift
refuses it when it lifts. The bytecode is read once per code object, with the
code objects nested in it (inner functions, lambdas, comprehensions), for the
patterns a mutation compiles to on CPython 3.11 to 3.13: a load of the
variable, then a chain of reads through it (`x[0]`, `x['log']`, `x[k]`,
`x.log`), then a mutating method (`.append`, `.update`, ...) or an item store
or deletion (`x[k] = v`, `del x[k]`). The chain is the path from the captured
value to the container mutated (`state[0].append` mutates `state[0]`, not
`state`): `mutated_paths` gives it, step by step, `ANY` for a key the code
computes.
"""

from __future__ import annotations

import dis
import threading
import types
import weakref
from typing import Any, Final, TypeAlias, cast

__all__ = ["ANY", "ATTR_STEP", "ITEM_STEP", "Path", "mutated_names", "mutated_paths"]

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

# A step of a path: an item by a constant key, an attribute, or an item whose
# key the code computes (`ANY`).
ITEM_STEP: Final = "item"
ATTR_STEP: Final = "attr"
ANY: Final = ("item", None, "any")
Path: TypeAlias = tuple[tuple[Any, ...], ...]

# Keyed by `id(code)`, holding the code weakly: an entry is dropped with it.
_cache: dict[int, tuple[weakref.ref[types.CodeType], dict[str, frozenset[Path]]]] = {}
_lock = threading.Lock()


def mutated_names(code: types.CodeType) -> frozenset[str]:
    """The variables (free variables and parameters) whose value `code`, or code
    nested in it, mutates in place (at any depth)."""
    return frozenset(mutated_paths(code))


def mutated_paths(code: types.CodeType) -> dict[str, frozenset[Path]]:
    """For each variable (free variable or parameter) that `code`, or code nested
    in it, mutates through: the paths from its value to the containers mutated
    (`()` for the value itself)."""
    entry = _cache.get(id(code))
    if entry is not None and entry[0]() is code:
        return entry[1]
    found = _scan(code)
    paths = {name: frozenset(p) for name, p in found.items()}
    key = id(code)

    def forget(_: object) -> None:
        with _lock:
            if (old := _cache.get(key)) is not None and old[0]() is None:
                del _cache[key]

    with _lock:
        _cache[key] = (weakref.ref(code, forget), paths)
    return paths


def _parameters(code: types.CodeType) -> frozenset[str]:
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kw
    return frozenset(code.co_varnames[:count])


def _scan(code: types.CodeType) -> dict[str, set[Path]]:
    """Captured names `code` mutates through, with the paths: its free variables
    and parameters (what lift captures as cells and defaults), and in nested
    code the free variables that are those (not the enclosing code's own
    locals)."""
    found: dict[str, set[Path]] = {}
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
            if not loaded:
                continue
            if loaded[-1] in captured:
                path = _chain(instructions, n + 1)
                if path is not None:
                    found.setdefault(loaded[-1], set()).add(path)
            if len(loaded) == 2 and loaded[0] in captured:
                # 3.13: `x[k]` loads `x` and `k` in one superinstruction.
                path = _chain(instructions, n + 1, keyed=True)
                if path is not None:
                    found.setdefault(loaded[0], set()).add(path)
    names = frozenset(code.co_freevars) | _parameters(code)
    return {name: paths for name, paths in found.items() if name in names}


def _chain(
    instructions: list[dis.Instruction], start: int, keyed: bool = False
) -> Path | None:
    """The path a chain of reads starting at `start` takes to a container it
    then mutates, or `None` if the chain ends otherwise. `keyed`: a computed
    key was loaded already, with the container."""
    steps: list[tuple[Any, ...]] = []
    n = start
    if keyed:
        nxt = _at(instructions, n)
        if nxt is None:
            return None
        if nxt.opname in _ITEM_WRITES:
            return ()
        if nxt.opname != "BINARY_SUBSCR":
            return None
        steps.append(ANY)
        n += 1
    for _ in range(64):  # a bounded chain
        nxt = _at(instructions, n)
        if nxt is None:
            return None
        op = nxt.opname
        if op in ("LOAD_ATTR", "LOAD_METHOD"):
            name = _attr(nxt)
            if name in _MUTATORS:
                return tuple(steps)
            steps.append((ATTR_STEP, name))
            n += 1
            continue
        after = _at(instructions, n + 1)
        if after is None:
            return None
        if op in _PLAIN_LOADS or op == "LOAD_FAST_LOAD_FAST":
            if after.opname in _ITEM_WRITES:
                return tuple(steps)
            if after.opname == "BINARY_SUBSCR":
                steps.append(_item(nxt))
                n += 2
                continue
        return None
    return None


def _item(ins: dis.Instruction) -> tuple[Any, ...]:
    """The step an item read by the key `ins` loads takes."""
    if ins.opname == "LOAD_CONST":
        value: object = ins.argval
        if type(value) in (int, str):
            return (ITEM_STEP, value)
    return ANY


def _at(instructions: list[dis.Instruction], n: int) -> dis.Instruction | None:
    return instructions[n] if n < len(instructions) else None


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
