"""What a code object tells us once, cached for every function that shares it.

Reading bytecode is slow (about a millisecond for one of optax's update
functions, nested code included); lifting a fresh closure of a code object
already seen is the common case in a sweep. So the analysis is done
once per code object and kept, weakly, in a dict keyed by `id(code)`.
"""

from __future__ import annotations

import dis
import threading
import types
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

from ._labels import CELL, Label

__all__ = ["FREE", "PARAM", "CodeInfo", "Flow", "Source", "code_info"]

# What a variable is to the code reading it (PEP 709 makes a comprehension's
# variable a local of the function around it, so names alone cannot tell).
FREE: Final = "free"  # a free variable: a closure cell the function captured
PARAM: Final = "param"  # one of the function's own parameters
# (FREE or PARAM, name); a reading of its own (`lift._mutation`) adds more.
Source: TypeAlias = tuple[Any, ...]

_FAST_LOADS: Final = frozenset(
    {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_FAST_AND_CLEAR"}
)
_FAST_PAIRS: Final = frozenset(  # 3.13's superinstructions (3.14's borrowing one)
    {"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"}
)
_DEREF_LOADS: Final = frozenset(
    {"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"}
)
_DEREF_STORES: Final = frozenset({"STORE_DEREF", "DELETE_DEREF"})
# Conditional jumps that test their operand's truth (`if`, `while`, `and`, `or`,
# `assert`, a ternary) across 3.11 to 3.14, and the other truth tests: 3.13's
# `TO_BOOL` and `not`. Each calls `bool()` on a traced value, which fails.
_TRUTH_JUMPS: Final = frozenset(
    {
        "POP_JUMP_IF_TRUE",
        "POP_JUMP_IF_FALSE",
        "POP_JUMP_FORWARD_IF_TRUE",
        "POP_JUMP_FORWARD_IF_FALSE",
        "POP_JUMP_BACKWARD_IF_TRUE",
        "POP_JUMP_BACKWARD_IF_FALSE",
    }
)
_KEEPING_JUMPS: Final = frozenset({"JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"})
_NONE_JUMPS: Final = frozenset(
    {
        "POP_JUMP_IF_NONE",
        "POP_JUMP_IF_NOT_NONE",
        "POP_JUMP_FORWARD_IF_NONE",
        "POP_JUMP_FORWARD_IF_NOT_NONE",
        "POP_JUMP_BACKWARD_IF_NONE",
        "POP_JUMP_BACKWARD_IF_NOT_NONE",
    }
)
_LOADS: Final = _FAST_LOADS | _DEREF_LOADS
_UNCONDITIONAL: Final = frozenset(
    {
        "JUMP",
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_ABSOLUTE",
        "JUMP_NO_INTERRUPT",
        "JUMP_BACKWARD_NO_INTERRUPT",
    }
)
_ENDS: Final = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})
# Operations whose result carries what their operands came from: `lr * 2 > 1`
# branches on `lr`. (A call's result does not: `isinstance(lr, float)` is fine.)
_BINARY: Final = frozenset({"BINARY_OP", "COMPARE_OP", "CONTAINS_OP", "BINARY_SUBSCR"})
_UNARY: Final = frozenset({"UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_POSITIVE"})
_BUILDS: Final = frozenset({"BUILD_TUPLE", "BUILD_LIST", "BUILD_SET"})
# Instructions that leave the stack alone.
_NO_STACK: Final = frozenset(
    {
        "NOP",
        "RESUME",
        "CACHE",
        "EXTENDED_ARG",
        "COPY_FREE_VARS",
        "MAKE_CELL",
        "KW_NAMES",
    }
)
# Instructions that only convert or cache and may stand between a comparison and
# its jump (3.13 adds `TO_BOOL`): skipped when reading an `isinstance` guard.
_TRANSPARENT: Final = frozenset({"TO_BOOL", "EXTENDED_ARG", "CACHE", "NOP"})
_NONE: Final[frozenset[Source]] = frozenset()
# What a stack slot carries when its value is a tuple or list the code built or
# loaded (`(a, b)`): indexing it (`(a, b)[lr > 0.5]`) is Python selection, which
# a traced index cannot do.
_SEQUENCE: Final[Source] = ("sequence", "")
_SEQUENCES: Final[frozenset[Source]] = frozenset({_SEQUENCE})


class CodeInfo:
    """Facts about one code object that `lift` needs on every capture.

    Variables are told apart by scope, not by name: a comprehension's variable
    (a local of the function on 3.12+, PEP 709) or a nested function's own local
    named like a capture is not that capture.

    Attributes:
        code: the code object.
        hash: `hash(code)`, computed once (CPython recomputes it on every call).
        freevars: `co_freevars`, in cell order.
        cell_labels: the `Label` of each cell, in cell order.
        rebound: free variables the code rebinds (`nonlocal x; x = ...`), here
            or in a function defined inside it that shares the variable.
        branched: free variables whose value feeds Python control flow
            (`if b2 != 1.0:`, `while lr > 0`, `not mask`, `lo < x < hi`), here
            or in a function defined inside this one that shares the variable.
            A float capture used this way cannot be traced, so it is kept static.
        branch_sites: for each branched variable, the `(filename, line)` of the
            first such branch.
        global_names: the names the code (and code nested in it) looks up as
            globals or attributes (`co_names`).
        branches_on_params: whether this code, or code defined inside it,
            branches in Python on one of its own parameters (optax's `masked`
            maps `lambda m, p: p if m else ...` over its captured mask). A
            boolean NumPy capture of a graph with such code is kept static: it
            may flow there.
    """

    __slots__ = (
        "__weakref__",
        "_operands",
        "branch_sites",
        "branched",
        "branches_on_params",
        "cell_labels",
        "code",
        "freevars",
        "global_names",
        "hash",
        "rebound",
        "unplain",
    )

    def __init__(self, code: types.CodeType) -> None:
        self.code = code
        self.hash = hash(code)
        self.freevars = code.co_freevars
        self.cell_labels = tuple(Label.of(CELL, name) for name in code.co_freevars)
        rebound: set[str] = set()
        sites: dict[str, tuple[str, int]] = {}
        flows = False
        names: set[str] = set()
        # Every code object defined inside this one, each with the names of its
        # free variables that are this code's free variables (resolved scope by
        # scope: a nested function's own local ends the chain).
        stack: list[tuple[types.CodeType, dict[str, str]]] = [
            (code, {n: n for n in code.co_freevars})
        ]
        while stack:
            c, outer = stack.pop()
            names.update(c.co_names)
            scan = _Scan(c)
            flows = flows or bool(scan.param_branches)
            rebound.update(outer[n] for n in scan.stores if n in outer)
            for name, line in scan.free_branches.items():
                if name in outer:
                    sites.setdefault(outer[name], (c.co_filename, line))
            own = set(c.co_cellvars) | set(c.co_varnames)
            for k in c.co_consts:
                if isinstance(k, types.CodeType):
                    # `k`'s free variable `n` is `c`'s cell `n`: `c`'s own
                    # local when `c` binds it, else `c`'s free variable.
                    shared = {
                        n: outer[n]
                        for n in k.co_freevars
                        if n in outer and (n not in own or n in c.co_freevars)
                    }
                    stack.append((k, shared))
        self.rebound = frozenset(rebound)
        self.branched = frozenset(sites)
        self.branch_sites = sites
        # Variables whose capture needs more than its type read: one of both.
        self.unplain = self.branched | self.rebound
        self.global_names = frozenset(names)
        self.branches_on_params = flows
        self._operands: dict[int, frozenset[Source]] | None = None

    def operands(self, offset: int) -> frozenset[Source]:
        """The free variables and parameters the operands of the instruction at
        `offset` were computed from, through calls too (`if positive(lr):`,
        `int(n)`, `jnp.zeros((n,))`): which captures an error raised there (a
        traced value needed concrete) can be blamed on. Read on first use (an
        error's diagnosis), then kept."""
        operands = self._operands
        if operands is None:
            operands = self._operands = _Scan(self.code, through_calls=True).operands
        return operands.get(offset, _NONE)


class Flow:
    """One pass over a code object's bytecode (CPython 3.11+) that follows its
    stack: the abstract interpreter lift's readings of code share.

    Each stack slot holds a frozenset of facts about its value (`Source`s: the
    variables it was computed from, and whatever else a subclass tracks). A
    subclass's `step` says what the instructions it reads make of their operands
    and falls back to this one's, which moves slots: loads and stores of
    variables (by scope: a free variable, a parameter, a local, which holds what
    all its assignments stored), `COPY`, `SWAP`, `POP_TOP`, and jumps, which
    carry the stack to their targets (where ways meet, a slot holds what each
    brings); any other instruction is read by its stack effect, its result
    holding `unknown` (or, with `through_calls`, all its operands held).
    Exception handlers start from an unknown stack. A second pass, when some
    local holds something, sees what a loop assigns after reading.
    """

    # What a slot holds when nothing is known of its value.
    unknown: frozenset[Source] = _NONE
    # A result read by stack effect carries its operands' facts, and `operands`
    # records what each instruction popped (by offset).
    through_calls: bool = False

    def __init__(
        self,
        code: types.CodeType,
        start: Mapping[str, frozenset[Source]] | None = None,
    ) -> None:
        """`start`: what some locals hold on entry (a comprehension's iterator,
        `.0`, which the code defining it passes)."""
        self.stores: set[str] = set()  # free variables stored to or deleted
        self.operands: dict[int, frozenset[Source]] = {}
        self.popped: list[frozenset[Source]] = []
        instructions = list(dis.get_instructions(code))
        self.params = self.parameters(code)
        # `LOAD_DEREF`'s argument indexes the locals, then cells that are not
        # parameters, then free variables (3.11+).
        self.first_free = len(code.co_varnames) + len(
            set(code.co_cellvars) - set(code.co_varnames)
        )
        self.freevars = code.co_freevars
        entries = _exception_entries(code)
        self.shadowed = _comprehension_scopes(instructions, entries)
        self.guarded = self.guarded_loads(instructions)
        # What each local variable was computed from, over all its assignments
        # (`k = n; while k > 0.5:`).
        self.locals: dict[str, frozenset[Source]] = dict(start) if start else {}
        self.run(code, instructions, entries)
        if self.locals:
            self.run(code, instructions, entries)

    def parameters(self, code: types.CodeType) -> frozenset[str]:
        """The locals whose value is a `PARAM` source: the named parameters."""
        return frozenset(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])

    def guarded_loads(self, instructions: list[dis.Instruction]) -> set[int]:
        """Offsets of loads whose value is known not to matter (`unknown`)."""
        return set()

    def run(
        self,
        code: types.CodeType,
        instructions: list[dis.Instruction],
        entries: list[Any],
    ) -> None:
        pending: dict[int, list[frozenset[Source]]] = {}
        unknown = self.unknown
        for entry in entries:
            pending[entry.target] = [unknown] * (entry.depth + 1 + int(entry.lasti))
        stack: list[frozenset[Source]] | None = []
        self.line = code.co_firstlineno
        through_calls = self.through_calls
        popped = self.popped
        for ins in instructions:
            if ins.positions is not None and ins.positions.lineno is not None:
                self.line = ins.positions.lineno
            here = pending.pop(ins.offset, None)
            if here is not None:
                if stack is None or len(stack) != len(here):
                    stack = here
                else:
                    stack = [a | b for a, b in zip(stack, here, strict=True)]
            elif stack is None:
                stack = []  # not reached by a jump followed here
            if ins.opname not in _NO_STACK:
                popped.clear()
                stack = self.step(ins, stack, pending)
                if through_calls and popped:
                    self.operands[ins.offset] = _NONE.union(*popped) - _SEQUENCES

    def pop(self, stack: list[frozenset[Source]]) -> frozenset[Source]:
        value = stack.pop() if stack else self.unknown
        self.popped.append(value)
        return value

    def step(
        self,
        ins: dis.Instruction,
        stack: list[frozenset[Source]],
        pending: dict[int, list[frozenset[Source]]],
    ) -> list[frozenset[Source]] | None:
        """`stack` after `ins` (`None` where control does not fall through)."""
        op = ins.opname
        if op in _FAST_LOADS:
            guarded = op == "LOAD_FAST_AND_CLEAR" or ins.offset in self.guarded
            stack.append(self.unknown if guarded else self.fast(ins.argval, ins.offset))
        elif op in _FAST_PAIRS:
            stack.extend(self.fast(name, ins.offset) for name in ins.argval)
        elif op == "STORE_FAST_LOAD_FAST":
            self.store(ins.argval[0], self.pop(stack))
            stack.append(self.fast(ins.argval[1], ins.offset))
        elif op == "STORE_FAST_STORE_FAST":
            self.store(ins.argval[0], self.pop(stack))
            self.store(ins.argval[1], self.pop(stack))
        elif op == "STORE_FAST":
            self.store(ins.argval, self.pop(stack))
        elif op in _DEREF_LOADS:
            if op == "LOAD_FROM_DICT_OR_DEREF":
                self.pop(stack)
            free = self.free(ins)
            if ins.offset in self.guarded:
                stack.append(self.unknown)
            elif free is not None:
                stack.append(frozenset({(FREE, free)}))
            else:
                stack.append(self.fast(ins.argval, ins.offset))
        elif op in _DEREF_STORES:
            free = self.free(ins)
            if free is not None:
                self.stores.add(free)
            if op == "STORE_DEREF":
                value = self.pop(stack)
                if free is None:
                    self.store(ins.argval, value)
        elif op == "COPY":
            n = ins.arg or 1
            stack.append(stack[-n] if len(stack) >= n else self.unknown)
        elif op == "SWAP":
            n = ins.arg or 2
            if len(stack) >= n:
                stack[-1], stack[-n] = stack[-n], stack[-1]
        elif op == "POP_TOP":
            self.pop(stack)
        elif op == "PUSH_NULL":
            stack.append(self.unknown)
        elif op in _TRUTH_JUMPS or op in _NONE_JUMPS:
            value = self.pop(stack)
            if op in _TRUTH_JUMPS:
                self.truth(value)
            self.carry(pending, ins, stack)
        elif op in _KEEPING_JUMPS:
            value = self.pop(stack)
            self.truth(value)
            self.carry(pending, ins, [*stack, value])
        elif op in _UNCONDITIONAL:
            self.carry(pending, ins, stack)
            return None
        elif op in _ENDS:
            return None
        else:
            self.generic(ins, stack, pending)
        return stack

    def fast(self, name: str, offset: int) -> frozenset[Source]:
        """What a local holds: what was assigned to it, and the parameter of
        that name, unless a comprehension inlined there (3.12+) has a variable
        of that name."""
        assigned = self.locals.get(name, self.unknown)
        if name in self.params and not any(
            name in names and start <= offset < end
            for start, end, names in self.shadowed
        ):
            return assigned | {(PARAM, name)}
        return assigned

    def store(self, name: str, value: frozenset[Source]) -> None:
        if value:
            self.locals[name] = self.locals.get(name, _NONE) | value

    def free(self, ins: dis.Instruction) -> str | None:
        """The free variable a `*_DEREF` instruction reads or writes, if any (not
        a cell of the code's own)."""
        k = (ins.arg or 0) - self.first_free
        return self.freevars[k] if 0 <= k < len(self.freevars) else None

    def truth(self, value: frozenset[Source]) -> None:
        """A value whose truth Python tests (`if`, `while`, `and`, `not`)."""

    def carry(
        self,
        pending: dict[int, list[frozenset[Source]]],
        ins: dis.Instruction,
        stack: list[frozenset[Source]],
    ) -> None:
        """Record the stack a forward jump brings to its target."""
        target = ins.argval
        if type(target) is not int or target <= ins.offset:
            return  # a loop's back edge: its head was read already
        there = pending.get(target)
        if there is None or len(there) != len(stack):
            pending[target] = list(stack)
        else:
            pending[target] = [a | b for a, b in zip(there, stack, strict=True)]

    def generic(
        self,
        ins: dis.Instruction,
        stack: list[frozenset[Source]],
        pending: dict[int, list[frozenset[Source]]],
    ) -> None:
        """An instruction read by its stack effect only: its result (if any)
        holds `unknown` (a call, an attribute, a container), or, with
        `through_calls`, all it popped."""
        try:
            effect = dis.stack_effect(ins.opcode, ins.arg, jump=False)
        except ValueError:  # an instruction without a stack effect of its own
            return
        if effect > 0:
            stack.extend([self.unknown] * effect)
        else:
            start = max(0, len(stack) - (1 - effect))
            taken = stack[start:]
            del stack[start:]
            if not self.through_calls:
                stack.append(self.unknown)
            else:
                self.popped.extend(taken)
                stack.append(_NONE.union(*taken))
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            try:
                jumped = dis.stack_effect(ins.opcode, ins.arg, jump=True)
            except ValueError:
                return
            depth = max(0, len(stack) - effect + jumped)
            carried = stack[:depth] + [self.unknown] * (depth - len(stack))
            self.carry(pending, ins, carried)


class _Scan(Flow):
    """Which free variables and parameters reach a truth test, and which free
    variables are stored to (`Flow.stores`).

    Each stack slot holds the variables its value was computed from (through
    arithmetic, comparisons, subscripts and local variables, not calls).
    """

    def __init__(self, code: types.CodeType, through_calls: bool = False) -> None:
        self.free_branches: dict[str, int] = {}
        self.param_branches: set[str] = set()
        # With `through_calls`, a call's result carries its operands' variables,
        # and `operands` records what each instruction popped.
        self.through_calls = through_calls
        super().__init__(code)

    def guarded_loads(self, instructions: list[dis.Instruction]) -> set[int]:
        return _guarded_loads(instructions)

    def step(
        self,
        ins: dis.Instruction,
        stack: list[frozenset[Source]],
        pending: dict[int, list[frozenset[Source]]],
    ) -> list[frozenset[Source]] | None:
        op = ins.opname
        if op in _BINARY:
            right, left = self.pop(stack), self.pop(stack)
            if _SEQUENCE in left and (
                op == "BINARY_SUBSCR" or ins.argrepr == "[]"  # 3.14's subscript
            ):
                self.truth(right)
            stack.append((left | right) - _SEQUENCES)
        elif op in _UNARY:
            stack.append(self.pop(stack))
        elif op in _BUILDS:  # `lr in (a, b)` compares `lr` with `b`
            items = [self.pop(stack) for _ in range(ins.arg or 0)]
            built = _NONE.union(*items)
            stack.append(built if op == "BUILD_SET" else built | _SEQUENCES)
        elif op == "LOAD_CONST" and type(ins.argval) is tuple:
            stack.append(_SEQUENCES)
        elif op == "TO_BOOL" or op == "UNARY_NOT":
            self.truth(self.pop(stack))
            stack.append(_NONE)
        else:
            return super().step(ins, stack, pending)
        return stack

    def truth(self, value: frozenset[Source]) -> None:
        for kind, name in value:
            if kind == FREE:
                self.free_branches.setdefault(name, self.line)
            elif kind == PARAM:
                self.param_branches.add(name)


def _exception_entries(code: types.CodeType) -> list[Any]:
    """The exception table (`dis` reads it on 3.11+ as `exception_entries`,
    undocumented): each entry's `start`, `end`, `target`, `depth`, `lasti`."""
    entries: Any = getattr(dis.Bytecode(code), "exception_entries", ())
    return list(entries)


def _comprehension_scopes(
    instructions: list[dis.Instruction], entries: list[Any]
) -> list[tuple[int, int, frozenset[str]]]:
    """The bytecode ranges of comprehensions inlined into `code` (3.12+, PEP
    709) and the variables each shadows: the ranges its exception handler
    covers, whose `STORE_FAST`s restore the variables saved by
    `LOAD_FAST_AND_CLEAR`."""
    saved = {i.argval for i in instructions if i.opname == "LOAD_FAST_AND_CLEAR"}
    if not saved:
        return []
    by_offset = {i.offset: k for k, i in enumerate(instructions)}
    out: list[tuple[int, int, frozenset[str]]] = []
    for entry in entries:
        k = by_offset.get(entry.target)
        if k is None:
            continue
        restored: set[str] = set()
        for ins in instructions[k:]:
            if ins.opname == "STORE_FAST":
                restored.add(ins.argval)
            elif ins.opname == "STORE_FAST_STORE_FAST":
                restored.update(ins.argval)
            elif ins.opname not in ("SWAP", "POP_TOP", "NOP"):
                break
        if restored and restored <= saved:
            out.append((entry.start, entry.end, frozenset(restored)))
    return out


def _guarded_loads(instructions: list[dis.Instruction]) -> set[int]:
    """Offsets of loads that run only after `isinstance(x, (int, float, ...)) and`
    on the same variable: false for a traced value, so what follows never sees
    one (optax's `isinstance(weight_decay, (int, float)) and weight_decay ==
    0.0`)."""
    seen = [i for i in instructions if i.opname not in _TRANSPARENT]
    out: set[int] = set()
    for k, ins in enumerate(seen):
        if (
            ins.opname in _FAST_LOADS or ins.opname in _DEREF_LOADS
        ) and _number_guarded(seen, k, ins):
            out.add(ins.offset)
    return out


_NUMBER_TYPES: Final = frozenset({"int", "float", "complex", "bool", "Number", "Real"})
_FALSE_JUMPS: Final = frozenset(
    {
        "POP_JUMP_IF_FALSE",
        "POP_JUMP_FORWARD_IF_FALSE",
        "POP_JUMP_BACKWARD_IF_FALSE",
        "JUMP_IF_FALSE_OR_POP",
    }
)


def _number_guarded(
    instructions: list[dis.Instruction], start: int, load: dis.Instruction
) -> bool:
    """Whether the comparison starting at `start` runs only after
    `isinstance(x, (int, float, ...)) and ...` on the same variable: false for a
    traced value, so the comparison never sees one (optax's
    `isinstance(weight_decay, (int, float)) and weight_decay == 0.0`)."""
    if start < 1 or instructions[start - 1].opname not in _FALSE_JUMPS:
        return False
    window = instructions[max(0, start - 12) : start - 1]
    for j, ins in enumerate(window[:-1]):
        if ins.opname == "LOAD_GLOBAL" and ins.argval == "isinstance":
            first = window[j + 1]
            if first.opname not in _LOADS or first.argval != load.argval:
                return False
            return all(
                i.opname in ("PRECALL", "CALL", "BUILD_TUPLE", "PUSH_NULL", "KW_NAMES")
                or (
                    i.opname in ("LOAD_GLOBAL", "LOAD_ATTR")
                    and i.argval in _NUMBER_TYPES
                )
                or (i.opname == "LOAD_GLOBAL" and i.argval in ("numbers",))
                for i in window[j + 2 :]
            )
    return False


# Keyed by `id(code)`; the `CodeInfo` holds its code, so an entry lives exactly as
# long as some skeleton (or the small ring of the 64 most recent) uses it.
_cache: weakref.WeakValueDictionary[int, CodeInfo] = weakref.WeakValueDictionary()
_recent: deque[CodeInfo] = deque(maxlen=64)
_lock = threading.Lock()


def code_info(code: types.CodeType) -> CodeInfo:
    """The cached `CodeInfo` of `code` (computed on first sight)."""
    info = _cache.get(id(code))
    if info is not None and info.code is code:
        return info
    info = CodeInfo(code)
    with _lock:
        _cache[id(code)] = info
        _recent.append(info)
    return info
