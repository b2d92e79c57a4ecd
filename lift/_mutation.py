"""Which captured containers a function's code mutates in place, and where.

A captured list or dict that holds dynamic leaves is rebuilt around them when
the function is rebuilt: code that appends to it, sets an item or calls a
mutating method would change that copy, not the user's container, so lift
refuses it when it lifts. The bytecode is read once per code object, with the
code objects nested in it (inner functions, lambdas, comprehensions), by
following its stack (`lift._code.Flow`, on CPython 3.11 to 3.13): each slot
holds the paths into captured variables its value is (`x`, `x[0]`, `x['log']`,
`x[k]`, `x.log`, through local variables too: `log = self.log`), and the
instructions that mutate an operand record its paths:

- an item store or deletion, whatever computes the key (`x[k] = v`,
  `x[i + 1] = v`, `del x[k]`), and an augmented one (`x['loss'] += v`);
- a slice store or deletion (`x[:] = v`, `x[a:b] = v`, `del x[1:]`);
- a mutating method (`.append`, `.update`, ...: `_MUTATORS`), read as an
  attribute even if not called there (`push = x.append`);
- an augmented assignment to the container (`x += [v]`, `x |= {...}`), which
  lists and dicts do in place;
- a call of a function known to mutate its first argument, named through the
  function's globals (`heapq.heappush(x, v)`, `from bisect import insort`:
  `_MUTATING_FUNCTIONS`).

The path is the one from the captured value to the container mutated
(`state[0].append` mutates `state[0]`, not `state`; a slice store mutates the
container itself): `mutated_paths` gives it, step by step, `ANY` for a key the
code computes. Reading is not mutating: `x[i + 1]`, `x[:]` (a copy),
`sum(x)`, `len(x)`, `x['loss'] + v`, or `x` used as another container's key.

Not seen: a function of the user's own (or of a library other than those
listed) that mutates its argument, one of those listed under another name
(`from heapq import heappush as push`), a method called on an item reached by
iterating (`for row in rows: row.append(v)`), a container reached through a
call's result (`x.get('log').append(v)`), or stored into another object and
mutated there (`box.items = x; box.items.append(v)`).

Code with none of the instructions that record (an item or slice store or
deletion, an augmented operator, the name of a mutating method or function) is
not followed at all: most is not (`_may_mutate`).
"""

from __future__ import annotations

import bisect
import dis
import heapq
import operator
import random
import sys
import threading
import types
import weakref
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

from ._code import FREE, PARAM, Flow, Source

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

# Functions of the standard library that mutate their first argument, by the
# names their modules give them.
_MUTATING_FUNCTIONS: Final = (
    (heapq, ("heappush", "heappop", "heapify", "heapreplace", "heappushpop")),
    (bisect, ("insort", "insort_left", "insort_right")),
    (random, ("shuffle",)),
    (
        operator,
        (
            "setitem",
            "delitem",
            "iadd",
            "iconcat",
            "imul",
            "ior",
            "__setitem__",
            "__delitem__",
            "__iadd__",
            "__iconcat__",
            "__imul__",
            "__ior__",
        ),
    ),
)
_MUTATING: Final[dict[int, object]] = {
    id(f): f
    for module, names in _MUTATING_FUNCTIONS
    for f in (getattr(module, name) for name in names)
}
_MUTATING_NAMES: Final = frozenset(n for _, names in _MUTATING_FUNCTIONS for n in names)

# A step of a path: an item by a constant key, an attribute, or an item whose
# key the code computes (`ANY`).
ITEM_STEP: Final = "item"
ATTR_STEP: Final = "attr"
ANY: Final = ("item", None, "any")
Path: TypeAlias = tuple[tuple[Any, ...], ...]
# A captured name passed, at a path, to a call of a global chain
# (`heapq.heappush` is `("heapq", "heappush")`).
_Call: TypeAlias = tuple[str, Path, tuple[str, ...]]

# What a stack slot holds besides paths into variables (`(FREE, name, *steps)`,
# `(PARAM, name, *steps)`): a constant key, a slice, a global and attributes
# read from it, or a value of which nothing is known (never a constant key).
_CONST: Final = "const"
_SLICE: Final[Source] = ("slice",)
_GLOBAL: Final = "global"
_UNKNOWN: Final[frozenset[Source]] = frozenset({("unknown",)})
_VARIABLES: Final = (FREE, PARAM)

# Instructions that only pop: how many slots, and the depth of the container
# they write to (0: none).
_POPS: Final = {
    "STORE_SUBSCR": (3, 2),  # value, container, key
    "DELETE_SUBSCR": (2, 2),
    "STORE_SLICE": (4, 3),  # 3.12+: value, container, start, stop
    "DELETE_SLICE": (3, 3),
    "STORE_ATTR": (2, 0),
    "DELETE_ATTR": (1, 0),
    "STORE_GLOBAL": (1, 0),
    "STORE_NAME": (1, 0),
}
# The instruction whose operands are a call's (3.11 pops them at `PRECALL`).
_CALLS: Final = (
    frozenset({"PRECALL"}) if "PRECALL" in dis.opmap else frozenset({"CALL", "CALL_KW"})
)
# 3.13 pushes `LOAD_GLOBAL`'s NULL after the global, 3.11 and 3.12 before it.
_NULL_AFTER: Final = sys.version_info >= (3, 13)
# Opcodes that write to a container they pop (and `BINARY_OP`, whose augmented
# forms do): code with none of them, and no name of a mutating method or
# function, mutates nothing, and is not read.
_WRITES: Final = frozenset(
    dis.opmap[name]
    for name in ("STORE_SUBSCR", "DELETE_SUBSCR", "STORE_SLICE", "DELETE_SLICE")
    if name in dis.opmap
)
_BINARY_OP: Final = dis.opmap["BINARY_OP"]
_NAMES: Final = _MUTATORS | _MUTATING_NAMES

# Keyed by `id(code)`, holding the code weakly: an entry is dropped with it.
_cache: dict[
    int,
    tuple[weakref.ref[types.CodeType], dict[str, frozenset[Path]], tuple[_Call, ...]],
] = {}
_lock = threading.Lock()


def mutated_names(
    code: types.CodeType, namespace: Mapping[str, Any] | None = None
) -> frozenset[str]:
    """The variables (free variables and parameters) whose value `code`, or code
    nested in it, mutates in place (at any depth)."""
    return frozenset(mutated_paths(code, namespace))


def mutated_paths(
    code: types.CodeType, namespace: Mapping[str, Any] | None = None
) -> dict[str, frozenset[Path]]:
    """For each variable (free variable or parameter) that `code`, or code nested
    in it, mutates through: the paths from its value to the containers mutated
    (`()` for the value itself).

    `namespace`: the globals the code runs in (`fn.__globals__`), which tell
    whether a call of `heappush` or `hq.heappush` is `heapq.heappush`; without
    it, a call of any function named like one of `_MUTATING_FUNCTIONS` counts.
    """
    paths, calls = _analysis(code)
    if not calls:
        return paths
    found = {name: set(p) for name, p in paths.items()}
    for name, path, chain in calls:
        if namespace is None or _resolves(chain, namespace):
            found.setdefault(name, set()).add(path)
    return {name: frozenset(p) for name, p in found.items()}


def _analysis(
    code: types.CodeType,
) -> tuple[dict[str, frozenset[Path]], tuple[_Call, ...]]:
    """`code`'s mutations, and the calls that may be, cached."""
    entry = _cache.get(id(code))
    if entry is not None and entry[0]() is code:
        return entry[1], entry[2]
    found, calls = _scan(code)
    paths = {name: frozenset(p) for name, p in found.items()}
    ordered = tuple(sorted(calls, key=repr))
    key = id(code)

    def forget(_: object) -> None:
        with _lock:
            if (old := _cache.get(key)) is not None and old[0]() is None:
                del _cache[key]

    with _lock:
        _cache[key] = (weakref.ref(code, forget), paths, ordered)
    return paths, ordered


def _resolves(chain: tuple[str, ...], namespace: Mapping[str, Any]) -> bool:
    """Whether the global `chain[0]`, then attributes of modules (read from
    their `__dict__`: no code runs), is one of `_MUTATING_FUNCTIONS`."""
    value: object = namespace.get(chain[0])
    for name in chain[1:]:
        if not isinstance(value, types.ModuleType):
            return False
        value = value.__dict__.get(name)
    return _MUTATING.get(id(value)) is value


def _parameters(code: types.CodeType) -> frozenset[str]:
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kw
    return frozenset(code.co_varnames[:count])


def _scan(code: types.CodeType) -> tuple[dict[str, set[Path]], set[_Call]]:
    """Captured names `code` mutates through, with the paths, and the calls that
    may: its free variables and parameters (what lift captures as cells and
    defaults), and in nested code the free variables that are those (not the
    enclosing code's own locals)."""
    found: dict[str, set[Path]] = {}
    calls: set[_Call] = set()
    todo = [(code, frozenset(code.co_freevars) | _parameters(code))]
    while todo:  # iteratively, nested code included
        c, captured = todo.pop()
        todo.extend(
            (k, captured & frozenset(k.co_freevars))
            for k in c.co_consts
            if type(k) is types.CodeType
        )
        if captured and _may_mutate(c):
            _Mutations(c, captured, found, calls)
    return found, calls


def _may_mutate(code: types.CodeType) -> bool:
    """Whether `code` (not the code nested in it) has an instruction that
    `_Mutations` records: read from its opcodes (every other byte of
    `co_code`) and names."""
    if not _NAMES.isdisjoint(code.co_names):
        return True
    raw = code.co_code
    opcodes = set(raw[::2])
    return not _WRITES.isdisjoint(opcodes) or (
        _BINARY_OP in opcodes
        and any(
            raw[k] == _BINARY_OP and raw[k + 1] >= 13 for k in range(0, len(raw), 2)
        )
    )  # (`BINARY_OP`'s augmented forms are 13 and up: `NB_INPLACE_ADD` ...)


class _Mutations(Flow):
    """One code object's mutations of captured variables, added to `found`, and
    its calls of functions named like a mutating one, added to `calls`.

    A slot holds paths into variables (`(FREE, name, *steps)`, `(PARAM, name,
    *steps)`), a constant key, a slice, a global chain, or `_UNKNOWN` (every
    value the code computes otherwise: joined with a constant, it keeps the key
    from being taken for that constant).
    """

    unknown = _UNKNOWN

    def __init__(
        self,
        code: types.CodeType,
        captured: frozenset[str],
        found: dict[str, set[Path]],
        calls: set[_Call],
    ) -> None:
        self.captured = captured
        self.found = found
        self.calls = calls
        super().__init__(code)

    def parameters(self, code: types.CodeType) -> frozenset[str]:
        return _parameters(code)  # `*args` and `**kwargs` too

    def step(
        self,
        ins: dis.Instruction,
        stack: list[frozenset[Source]],
        pending: dict[int, list[frozenset[Source]]],
    ) -> list[frozenset[Source]] | None:
        op = ins.opname
        if op == "LOAD_CONST":
            value: object = ins.argval
            if type(value) in (int, str):
                stack.append(frozenset({(_CONST, value)}))
            else:  # (3.14 folds `x[:]`'s slice into a constant)
                stack.append(frozenset({_SLICE}) if type(value) is slice else _UNKNOWN)
        elif op == "LOAD_GLOBAL" or op == "LOAD_NAME":
            found = frozenset({(_GLOBAL, str(ins.argval))})
            nulls = [_UNKNOWN] * ((ins.arg or 0) & 1 if op == "LOAD_GLOBAL" else 0)
            stack.extend([found, *nulls] if _NULL_AFTER else [*nulls, found])
        elif op == "LOAD_ATTR" or op == "LOAD_METHOD":
            obj = self.pop(stack)
            name = str(ins.argval)
            if name in _MUTATORS:
                self.mutate(obj)
            attribute = _attribute(obj, name)
            if dis.stack_effect(ins.opcode, ins.arg) > 0:
                # A method and its object, or NULL and the attribute (in either
                # order): the call's arguments follow.
                stack.extend((attribute, attribute | obj))
            else:
                stack.append(attribute)
        elif op == "BINARY_SUBSCR" or (op == "BINARY_OP" and ins.argrepr == "[]"):
            key, container = self.pop(stack), self.pop(stack)
            stack.append(_item(container, key))
        elif op == "BINARY_OP":
            self.pop(stack)
            left = self.pop(stack)
            if ins.argrepr.endswith("="):  # `x += v`: in place for a list or dict
                self.mutate(left)
                stack.append(_paths(left) or _UNKNOWN)
            else:
                stack.append(_UNKNOWN)
        elif op == "BINARY_SLICE":  # 3.12+: `x[a:b]`, a copy
            del stack[-3:]
            stack.append(_UNKNOWN)
        elif op == "BUILD_SLICE":
            del stack[len(stack) - (ins.arg or 2) :]
            stack.append(frozenset({_SLICE}))
        elif op in _POPS:
            count, container = _POPS[op]
            if container and len(stack) >= container:
                self.mutate(stack[-container])
            del stack[len(stack) - count :]
        elif op == "UNPACK_SEQUENCE" or op == "UNPACK_EX":
            arg = ins.arg or 0
            count = arg if op == "UNPACK_SEQUENCE" else (arg & 0xFF) + 1 + (arg >> 8)
            items = _item(self.pop(stack), frozenset())
            stack.extend([items] * count)
        else:
            if op in _CALLS:
                self.call(ins, stack)
            return super().step(ins, stack, pending)
        return stack

    def mutate(self, value: frozenset[Source]) -> None:
        """Record that the code mutates the value a slot holds."""
        for source in value:
            if source[0] in _VARIABLES and source[1] in self.captured:
                self.found.setdefault(source[1], set()).add(source[2:])

    def call(self, ins: dis.Instruction, stack: list[frozenset[Source]]) -> None:
        """Record a call of a function named like a mutating one, with the paths
        of its first argument."""
        count = ins.arg or 0
        top = len(stack) - (ins.opname == "CALL_KW")  # (its keywords' names)
        if count < 1 or top - count - 2 < 0:
            return
        first = stack[top - count]
        for callee in stack[top - count - 2] | stack[top - count - 1]:
            if callee[0] != _GLOBAL or callee[-1] not in _MUTATING_NAMES:
                continue
            for source in first:
                if source[0] in _VARIABLES and source[1] in self.captured:
                    self.calls.add((source[1], source[2:], callee[1:]))


def _paths(value: frozenset[Source]) -> frozenset[Source]:
    """The paths into variables a slot holds."""
    return frozenset(s for s in value if s[0] in _VARIABLES)


def _attribute(obj: frozenset[Source], name: str) -> frozenset[Source]:
    """What reading the attribute `name` of a slot gives: the paths one step
    on, a global chain one name longer."""
    out: set[Source] = set()
    for source in obj:
        if source[0] in _VARIABLES:
            out.add((*source, (ATTR_STEP, name)))
        elif source[0] == _GLOBAL:
            out.add((*source, name))
    return frozenset(out) if out else _UNKNOWN


def _item(container: frozenset[Source], key: frozenset[Source]) -> frozenset[Source]:
    """What reading an item of a slot gives: its paths one step on, by the
    constant key if the key is one, else `ANY`; nothing for a slice (a copy)."""
    if key == frozenset({_SLICE}):
        return _UNKNOWN
    step: tuple[Any, ...] = ANY
    if len(key) == 1:
        (only,) = key
        if only[0] == _CONST:
            step = (ITEM_STEP, only[1])
    out = frozenset((*s, step) for s in container if s[0] in _VARIABLES)
    return out if out else _UNKNOWN
