"""The mutation analysis's reading of one code object: `Mutations`, a `Flow`
whose stack slots hold the paths into captured variables each value is
(`x`, `x[0]`, `x['log']`, `x[k]`, `x.log`, an item reached by iterating),
and which records the paths an instruction mutates and the calls that may."""

from __future__ import annotations

import dis
import sys
import types
from typing import Any, Final, TypeAlias

from ._flow import DEREF_LOADS, FREE, PARAM, Flow, Source
from ._mutators import IMPORT, MUTATORS, named_like_a_mutator

__all__ = [
    "ANY",
    "ATTR_STEP",
    "HOLDING",
    "ITEM_STEP",
    "SETATTR_STEP",
    "VARIABLES",
    "Mutations",
    "Path",
    "variable_of",
]

# A step of a path: an item by a constant key, an attribute, or an item whose
# key the code computes (`ANY`).
ITEM_STEP: Final = "item"
ATTR_STEP: Final = "attr"
ANY: Final = ("item", None, "any")
# The last step of a path whose object the code sets (or deletes) an attribute
# of, by name (`None`: a name the code computes): `m.calls = v`,
# `setattr(m, "calls", v)`, `del m.calls` mutate `m`.
SETATTR_STEP: Final = "setattr"
Path: TypeAlias = tuple[tuple[Any, ...], ...]


# A captured name passed, at a path, to a call of a global chain
# (`heapq.heappush` is `(_GLOBAL, "heapq", "heappush")`) or of a module the
# code imports itself (`(IMPORT, "heapq", "heappush")`).
Call: TypeAlias = tuple[str, Path, tuple[str, ...]]

# What a stack slot holds besides paths into variables (`(FREE, name, *steps)`,
# `(PARAM, name, *steps)`): a constant key, a slice, a global and attributes
# read from it, a module the code imports and attributes read from it, an
# import's names (`from m import a`), or a value of which nothing is known
# (never a constant key).
_CONST: Final = "const"
_SLICE: Final[Source] = ("slice",)
_GLOBAL: Final = "global"
_FROMLIST: Final[Source] = ("fromlist",)
_UNKNOWN: Final[frozenset[Source]] = frozenset({("unknown",)})
_VARIABLES: Final = (FREE, PARAM)
# Values that hold a captured path's items, or give them when iterated
# (`(kind, FREE or PARAM, name, *steps)`, of which `x[…]` is an item): a
# shallow copy or an iterator (`x[:]`, `list(x)`, `iter(x)`, `x.values()`),
# what `x.items()` and `enumerate(x)` give (pairs of a key and `x[…]`), one of
# those pairs, and what `zip(x, y)` gives (tuples holding `x[…]`).
_ELEMENTS: Final = "elements"
_PAIRS: Final = "pairs"
_PAIR: Final = "pair"
_ZIPPED: Final = "zipped"
# A list, tuple, set or dict the code builds (a display, `[x]`, `(x, y)`,
# `{"a": x}`, or what a comprehension appends to), holding the path itself
# (`(_DISPLAY, FREE or PARAM, name, *steps)`): its items are `x`, not `x[…]`.
# (What it holds unpacked, `[*x]`, `{**x}`, is `_ELEMENTS`'.)
_DISPLAY: Final = "display"
_HOLDING: Final = frozenset({_ELEMENTS, _PAIRS, _PAIR, _ZIPPED, _DISPLAY})
# Each of those kinds holds a path or another of them (`[[x]]` is `(_DISPLAY,
# _DISPLAY, FREE, "x")`, `enumerate([x])` `(_PAIRS, _DISPLAY, FREE, "x")`), up
# to `_NESTING` deep; deeper, nothing is known of it.
HOLDING: Final = _HOLDING  # (`(kind, ..., FREE or PARAM, name, *steps)`)
_NESTING: Final = 8
VARIABLES: Final = _VARIABLES
# A function made from a comprehension's or a generator expression's code
# (`(_CODE, id(code))`), which the code defining it calls with an iterator (its
# `.0`): where that holds a path's items, the nested code is followed with
# them (`any(r.append(v) for r in rows)`, and comprehensions on 3.11).
_CODE: Final = "code"

# What calls of accessors give (by name: not resolved), of a captured path's
# method or of a builtin: an item (by the first argument, the key, or `ANY`;
# with the second, a default, as well), an iterator or copy of it (`_ELEMENTS`,
# `_PAIRS`, `_PAIR`), one of its iterator's items (`next`), or its attribute.
_METHOD_RESULTS: Final = {
    "get": "item",
    "setdefault": "item",  # (which `MUTATORS` records as a mutation too)
    "pop": "item",
    "__getitem__": "item",
    "values": _ELEMENTS,
    "copy": _ELEMENTS,
    "items": _PAIRS,
    "popitem": _PAIR,
}
_BUILTIN_RESULTS: Final = {
    "iter": _ELEMENTS,
    "list": _ELEMENTS,
    "tuple": _ELEMENTS,
    "reversed": _ELEMENTS,
    "sorted": _ELEMENTS,
    "filter": _ELEMENTS,  # (of its second argument)
    "enumerate": _PAIRS,
    "zip": _ZIPPED,  # (of every argument)
    "next": "next",
    "getattr": "attribute",
    "type": "class",  # (`type(x).append(x, v)`, as `x.__class__.append`)
}
_UNBOUND_OWNERS: Final = frozenset({"list", "dict"})
ATTRIBUTE_STORES: Final = frozenset({"setattr", "delattr"})
_ATTRIBUTE_STORES: Final = ATTRIBUTE_STORES  # (`dict.get(d, k)`)

# Instructions that only pop: how many slots, and the depth of the container
# they write to (0: none).
_POPS: Final = {
    "STORE_SUBSCR": (3, 2),  # value, container, key
    "DELETE_SUBSCR": (2, 2),
    "STORE_SLICE": (4, 3),  # 3.12+: value, container, start, stop
    "DELETE_SLICE": (3, 3),
    "STORE_GLOBAL": (1, 0),
    "STORE_NAME": (1, 0),
}
# The instruction whose operands are a call's (3.11 pops them at `PRECALL`),
# and the one that pushes its result.
_CALLS: Final = (
    frozenset({"PRECALL"}) if "PRECALL" in dis.opmap else frozenset({"CALL", "CALL_KW"})
)
_RESULTS: Final = frozenset({"CALL", "CALL_KW"})
# Displays: the instructions that build one from the items they pop, that add
# to the one beneath (its depth their argument) what they pop (an item, a
# dict's key and value: the value on top), or what they pop unpacked (`[*x]`,
# `{**x}`).
_BUILDS: Final = frozenset({"BUILD_LIST", "BUILD_TUPLE", "BUILD_SET"})
_ADDS: Final = frozenset({"LIST_APPEND", "SET_ADD", "MAP_ADD"})
_UNPACKS: Final = frozenset({"LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE", "DICT_MERGE"})
# 3.13 pushes `LOAD_GLOBAL`'s NULL after the global, 3.11 and 3.12 before it.
_NULL_AFTER: Final = sys.version_info >= (3, 13)


class Mutations(Flow):
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
        aliases: frozenset[str],
        found: dict[str, set[Path]],
        calls: set[Call],
        seeds: dict[int, set[Source]],
        start: dict[str, frozenset[Source]] | None = None,
        cells: dict[str, frozenset[Source]] | None = None,
    ) -> None:
        """`cells`: what free variables hold that are locals of the code
        enclosing this one, assigned a path there (`log = state['log']`, then
        `def add(): log.append(v)`)."""
        self.captured = captured
        self.cells = cells or {}
        self.aliases = aliases
        self.found = found
        self.calls = calls
        self.seeds = seeds
        self.result: frozenset[Source] | None = None  # a call's, until pushed
        super().__init__(code, start)

    def parameters(self, code: types.CodeType) -> frozenset[str]:
        return parameters_of(code)  # `*args` and `**kwargs` too

    def step(
        self,
        ins: dis.Instruction,
        stack: list[frozenset[Source]],
        pending: dict[int, list[frozenset[Source]]],
    ) -> list[frozenset[Source]] | None:
        op = ins.opname
        if (
            op in DEREF_LOADS
            and self.cells
            and (free := self.free(ins)) in self.cells
            and ins.offset not in self.guarded
        ):  # a local of the enclosing code that holds a path
            if op == "LOAD_FROM_DICT_OR_DEREF":
                self.pop(stack)
            stack.append(frozenset({(FREE, free)}) | self.cells[free])
        elif op == "LOAD_CONST":
            value: object = ins.argval
            if type(value) in (int, str):
                stack.append(frozenset({(_CONST, value)}))
            elif type(value) is slice:  # (3.14 folds `x[:]`'s slice into one)
                stack.append(frozenset({_SLICE}))
            elif type(value) is tuple:  # (an import's names, among others)
                stack.append(frozenset({_FROMLIST}))
            elif type(value) is types.CodeType and comprehension_of(value):
                stack.append(frozenset({(_CODE, id(value))}))
            else:
                stack.append(_UNKNOWN)
        elif op == "LOAD_GLOBAL" or op == "LOAD_NAME":
            found = frozenset({(_GLOBAL, str(ins.argval))})
            nulls = [_UNKNOWN] * ((ins.arg or 0) & 1 if op == "LOAD_GLOBAL" else 0)
            stack.extend([found, *nulls] if _NULL_AFTER else [*nulls, found])
        elif op == "IMPORT_NAME":  # `import m`, `from m import f`: the module
            fromlist, level = self.pop(stack), self.pop(stack)
            name = str(ins.argval)
            if _FROMLIST not in fromlist:  # `import a.b` gives `a`
                name = name.partition(".")[0]
            absolute = level == frozenset({(_CONST, 0)})  # (not `from . import`)
            stack.append(frozenset({(IMPORT, name)}) if absolute else _UNKNOWN)
        elif op == "IMPORT_FROM":  # the module stays beneath
            stack.append(_attribute(stack[-1] if stack else _UNKNOWN, str(ins.argval)))
        elif op == "LOAD_ATTR" or op == "LOAD_METHOD":
            obj = self.pop(stack)
            name = str(ins.argval)
            if name in MUTATORS:
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
            container = stack[-3] if len(stack) >= 3 else _UNKNOWN
            del stack[-3:]
            stack.append(_iterated(container))
        elif op == "MAKE_FUNCTION":  # the code on top (3.11+)
            code = stack[-1] if stack else _UNKNOWN
            self.generic(ins, stack, pending)
            if stack:
                stack[-1] = frozenset(s for s in code if s[0] == _CODE) or _UNKNOWN
        elif op == "SET_FUNCTION_ATTRIBUTE":  # 3.13: the function stays on top
            function = stack[-1] if stack else _UNKNOWN
            self.generic(ins, stack, pending)
            if stack:
                stack[-1] = function
        elif op == "GET_ITER":
            stack.append(_iterated(self.pop(stack)))
        elif op == "FOR_ITER":  # pushes the next item, or jumps
            iterator = stack[-1] if stack else _UNKNOWN
            self.generic(ins, stack, pending)
            if stack:
                stack[-1] = _element(iterator)
        elif op == "MATCH_KEYS":  # `case {"log": log}`: the subject's items
            subject = stack[-2] if len(stack) >= 2 else _UNKNOWN
            stack.append(_iterated(subject))
        elif op == "COPY_DICT_WITHOUT_KEYS":  # `case {**rest}`: a copy of them
            subject = stack[-2] if len(stack) >= 2 else _UNKNOWN
            self.pop(stack)
            stack.append(_iterated(subject))
        elif op == "BUILD_SLICE":
            del stack[len(stack) - (ins.arg or 2) :]
            stack.append(frozenset({_SLICE}))
        elif op in _BUILDS or op == "BUILD_MAP" or op == "BUILD_CONST_KEY_MAP":
            count = ins.arg or 0
            if op == "BUILD_MAP":  # keys and values alternate
                count *= 2
            elif op == "BUILD_CONST_KEY_MAP":  # the values, then the keys' tuple
                count += 1
            items = stack[max(0, len(stack) - count) :] if count else []
            del stack[len(stack) - len(items) :]
            if op == "BUILD_MAP":
                items = items[1::2]
            elif op == "BUILD_CONST_KEY_MAP":
                items = items[:-1]
            stack.append(_display(items))
        elif op in _ADDS or op in _UNPACKS:
            value = self.pop(stack)
            if op == "MAP_ADD":
                self.pop(stack)  # (the key)
            depth = ins.arg or 1
            held = _display([value]) if op in _ADDS else _iterated(value)
            if len(stack) >= depth:
                stack[-depth] = _joined(stack[-depth], held)
        elif op == "LIST_TO_TUPLE" or (
            op == "CALL_INTRINSIC_1" and ins.argrepr == "INTRINSIC_LIST_TO_TUPLE"
        ):  # `(*x,)`: the same items
            pass
        elif op == "STORE_ATTR" or op == "DELETE_ATTR":  # the object on top
            self.mutate(_stored(self.pop(stack), str(ins.argval)))
            if op == "STORE_ATTR":
                self.pop(stack)
        elif op in _POPS:
            count, container = _POPS[op]
            if container and len(stack) >= container:
                self.mutate(stack[-container])
            del stack[len(stack) - count :]
        elif op == "UNPACK_SEQUENCE" or op == "UNPACK_EX":
            value = self.pop(stack)
            arg = ins.arg or 0
            if op == "UNPACK_SEQUENCE":
                items = [_item(value, frozenset({(_CONST, k)})) for k in range(arg)]
            else:  # `a, *rest = x`: `rest` a list of `x`'s items
                before, after = arg & 0xFF, arg >> 8
                item = _item(value, frozenset())
                items = [item] * before + [_iterated(value)] + [item] * after
            stack.extend(reversed(items))  # (the first on top)
        else:
            if op in _CALLS:
                self.result = self.call(ins, stack)
            after = super().step(ins, stack, pending)
            if op in _RESULTS and self.result is not None:
                if after:
                    after[-1] = self.result
                self.result = None
            return after
        return stack

    def mutate(self, value: frozenset[Source]) -> None:
        """Record that the code mutates the value a slot holds."""
        for source in value:
            if source[0] in _VARIABLES and source[1] in self.captured:
                self.found.setdefault(source[1], set()).add(source[2:])

    def call(
        self, ins: dis.Instruction, stack: list[frozenset[Source]]
    ) -> frozenset[Source] | None:
        """Record a call of a function named like a mutating one (or bound to
        one: `aliases`), with the paths of its first argument; what an
        accessor's call gives (`_METHOD_RESULTS`, `_BUILTIN_RESULTS`), if it is
        one."""
        count = ins.arg or 0
        top = len(stack) - (ins.opname == "CALL_KW")  # (its keywords' names)
        if top - count - 2 < 0:
            return None
        args = stack[top - count : top]
        callees = stack[top - count - 2] | stack[top - count - 1]
        if count == 0:  # a comprehension's function, then its iterator
            for function in stack[top - 2]:
                if function[0] == _CODE:
                    self.seeds.setdefault(function[1], set()).update(
                        s
                        for s in stack[top - 1]
                        if s[0] in _HOLDING and variable_of(s) in self.captured
                    )
        out: set[Source] = set()
        for callee in callees:
            kind = callee[0]
            if kind in _VARIABLES:
                step = callee[-1] if len(callee) > 2 else None
                if (
                    step is not None
                    and step[0] == ATTR_STEP
                    and step[1] in MUTATORS
                    and callee[-2:-1] == ((ATTR_STEP, "__class__"),)
                    and args
                ):  # `x.__class__.append(y, v)`, `type(x).append(y, v)`: `y`
                    self.mutate(args[0])
                if step is not None and step[0] == ATTR_STEP:
                    how = _METHOD_RESULTS.get(step[1])
                    if how is not None:  # `x.get(k)`
                        out.update(_result(frozenset({callee[:-1]}), how, args))
                continue
            if kind != _GLOBAL and kind != IMPORT:
                continue
            if (
                kind == _GLOBAL
                and len(callee) == 2
                and callee[1] in _ATTRIBUTE_STORES
                and len(args) > 1
            ):  # `setattr(m, "calls", v)`, as `m.calls = v`
                key = _constant(args[1])
                self.mutate(_stored(args[0], key if type(key) is str else None))
            if kind == _GLOBAL and len(callee) == 2 and callee[1] in _BUILTIN_RESULTS:
                out.update(_called(callee[1], args))
                if (
                    callee[1] == "getattr"
                    and len(args) > 1
                    and _constant(args[1]) in MUTATORS
                ):  # `getattr(x, "append")`, as `x.append`
                    self.mutate(args[0])
            elif (
                kind == _GLOBAL
                and len(callee) == 3
                and callee[1] in _UNBOUND_OWNERS
                and callee[2] in _METHOD_RESULTS
                and args
            ):  # `dict.get(d, k)`
                out.update(_result(args[0], _METHOD_RESULTS[callee[2]], args[1:]))
            if args and (
                named_like_a_mutator(callee)
                or (kind == _GLOBAL and callee[1] in self.aliases)
            ):
                for source in args[0]:
                    if source[0] in _VARIABLES and source[1] in self.captured:
                        self.calls.add((source[1], source[2:], callee))
        return frozenset(out) if out else None


def _paths(value: frozenset[Source]) -> frozenset[Source]:
    """The paths into variables a slot holds, and what holds their items."""
    return frozenset(s for s in value if s[0] in _VARIABLES or s[0] in _HOLDING)


def _result(
    obj: frozenset[Source], how: str, args: list[frozenset[Source]]
) -> frozenset[Source]:
    """What calling an accessor method of `obj` with `args` gives (`how`: see
    `_METHOD_RESULTS`)."""
    if how == "item":  # `x.get(k, default)`; `x.pop()` an item too
        found = _item(obj, args[0] if args else frozenset())
        return found | _paths(args[1]) if len(args) > 1 else found
    out = frozenset((how, *s) for s in obj if s[0] in _VARIABLES)
    return out if out else _UNKNOWN


def _called(name: str, args: list[frozenset[Source]]) -> frozenset[Source]:
    """What calling the builtin `name` with `args` gives (`_BUILTIN_RESULTS`)."""
    how = _BUILTIN_RESULTS[name]
    if not args:
        return _UNKNOWN
    if how == _ELEMENTS:  # `iter(x)`, `list(x)`, `sorted(x)`, `filter(f, x)`
        return _iterated(args[1] if name == "filter" and len(args) > 1 else args[0])
    if how == "next":  # `next(it, default)`
        found = _element(args[0])
        return found | _paths(args[1]) if len(args) > 1 else found
    if how == "class":  # `type(x)`: `x.__class__`
        return _attribute(args[0], "__class__") if len(args) == 1 else _UNKNOWN
    if how == "attribute":  # `getattr(x, "log", default)`
        key = _constant(args[1]) if len(args) > 1 else None
        if type(key) is not str:
            return _UNKNOWN
        found = _attribute(args[0], key)
        return found | _paths(args[2]) if len(args) > 2 else found
    out: set[Source] = set()
    for value in args if how == _ZIPPED else args[:1]:
        for s in value:  # what gives `x[…]` when iterated: paths, copies
            if s[0] == _ELEMENTS:  # (its items are the path's)
                out.add((how, *s[1:]))
            elif s[0] in _VARIABLES or s[0] in _HOLDING:
                out.update(_held(how, s))
    return frozenset(out) if out else _UNKNOWN


def _stored(obj: frozenset[Source], name: str | None) -> frozenset[Source]:
    """The paths an attribute store on `obj` mutates (`SETATTR_STEP`)."""
    return frozenset((*s, (SETATTR_STEP, name)) for s in obj if s[0] in _VARIABLES)


def _display(items: list[frozenset[Source]]) -> frozenset[Source]:
    """A display holding `items`: what holds the paths among them, and what
    holds their items (`[[x]]`, `[iter(x)]`)."""
    out = frozenset(
        held
        for item in items
        for s in item
        if s[0] in _VARIABLES or s[0] in _HOLDING
        for held in _held(_DISPLAY, s)
    )
    return out if out else _UNKNOWN


def _held(kind: str, source: Source) -> tuple[Source, ...]:
    """`(kind, *source)`, or nothing if that would nest deeper than
    `_NESTING`."""
    depth = 0
    while depth < len(source) and source[depth] in _HOLDING:
        depth += 1
    return ((kind, *source),) if depth < _NESTING else ()


def variable_of(source: Source) -> str:
    """The variable a path, or what holds one, leads from."""
    depth = 0
    while source[depth] in _HOLDING:
        depth += 1
    return source[depth + 1]


def _joined(a: frozenset[Source], b: frozenset[Source]) -> frozenset[Source]:
    """A display's holdings with more added (`_UNKNOWN` only if none)."""
    out = (a | b) - _UNKNOWN
    return out if out else _UNKNOWN


def _iterated(value: frozenset[Source]) -> frozenset[Source]:
    """An iterator over a slot's value, or a shallow copy of it: what holds its
    items (a pair's are its key and its value)."""
    out: set[Source] = set()
    for s in value:
        if s[0] in _VARIABLES:
            out.add((_ELEMENTS, *s))
        elif s[0] == _PAIR:
            out.add((_ELEMENTS, *s[1:]))
        elif s[0] in _HOLDING:
            out.add(s)
    return frozenset(out) if out else _UNKNOWN


def _element(value: frozenset[Source]) -> frozenset[Source]:
    """An item of a slot's value, by a key the code computes or by iterating:
    `x[…]` for a path `x` or what holds its items."""
    out: set[Source] = set()
    for s in value:
        while s[0] == _ELEMENTS or s[0] == _PAIR:  # the items of what it holds
            s = s[1:]
        kind = s[0]
        if kind in _VARIABLES:
            out.add((*s, ANY))
        elif kind == _DISPLAY:
            out.add(s[1:])
        elif kind == _PAIRS:
            out.add((_PAIR, *s[1:]))
        elif kind == _ZIPPED:
            out.add((_ELEMENTS, *s[1:]))
    return frozenset(out) if out else _UNKNOWN


def _attribute(obj: frozenset[Source], name: str) -> frozenset[Source]:
    """What reading the attribute `name` of a slot gives: the paths one step
    on, a global's or a module's chain one name longer."""
    out: set[Source] = set()
    for source in obj:
        if source[0] in _VARIABLES:
            out.add((*source, (ATTR_STEP, name)))
        elif source[0] == _GLOBAL or source[0] == IMPORT:
            out.add((*source, name))
    return frozenset(out) if out else _UNKNOWN


def _item(container: frozenset[Source], key: frozenset[Source]) -> frozenset[Source]:
    """What reading an item of a slot gives: its paths one step on, by the
    constant key if the key is one, else `ANY`; for a slice, a copy holding its
    items; for what holds a path's items, one of them (not a pair's key)."""
    if key == frozenset({_SLICE}):
        return _iterated(container)
    constant = _constant(key)
    step: tuple[Any, ...] = ANY if constant is None else (ITEM_STEP, constant)
    out: set[Source] = set()
    for s in container:
        if s[0] in _VARIABLES:
            out.add((*s, step))
        elif s[0] in _HOLDING and not (s[0] == _PAIR and step[1] in (0, -2)):
            out.update(_element(frozenset({s})) - _UNKNOWN)
    return frozenset(out) if out else _UNKNOWN


def _constant(value: frozenset[Source]) -> object:
    """The constant key a slot holds (an `int` or a `str`), if it holds only
    that."""
    if len(value) == 1:
        (only,) = value
        if only[0] == _CONST:
            return only[1]
    return None


def parameters_of(code: types.CodeType) -> frozenset[str]:
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kw
    return frozenset(code.co_varnames[:count])


def comprehension_of(code: types.CodeType) -> bool:
    """Whether `code` is a comprehension's or a generator expression's: called
    once, with an iterator (`.0`), by the code defining it."""
    return code.co_argcount == 1 and code.co_varnames[:1] == (".0",)
