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
from typing import Final

from .._holders.labels import CELL, Label
from .flow import (
    DEREF_LOADS,
    FAST_LOADS,
    FREE,
    NONE_SOURCE,
    PARAM,
    SEQUENCE,
    SEQUENCES,
    Flow,
    Source,
)

__all__ = ["CodeInfo", "code_info"]

_LOADS: Final = FAST_LOADS | DEREF_LOADS
# Operations whose result carries what their operands came from: `lr * 2 > 1`
# branches on `lr`. (A call's result does not: `isinstance(lr, float)` is fine.)
_BINARY: Final = frozenset({"BINARY_OP", "COMPARE_OP", "CONTAINS_OP", "BINARY_SUBSCR"})
_UNARY: Final = frozenset({"UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_POSITIVE"})
_BUILDS: Final = frozenset({"BUILD_TUPLE", "BUILD_LIST", "BUILD_SET"})
# Instructions that only convert or cache and may stand between a comparison and
# its jump (3.13 adds `TO_BOOL`): skipped when reading an `isinstance` guard.
_TRANSPARENT: Final = frozenset({"TO_BOOL", "EXTENDED_ARG", "CACHE", "NOP"})


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
        return operands.get(offset, NONE_SOURCE)


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
            if SEQUENCE in left and (
                op == "BINARY_SUBSCR" or ins.argrepr == "[]"  # 3.14's subscript
            ):
                self.truth(right)
            stack.append((left | right) - SEQUENCES)
        elif op in _UNARY:
            stack.append(self.pop(stack))
        elif op in _BUILDS:  # `lr in (a, b)` compares `lr` with `b`
            items = [self.pop(stack) for _ in range(ins.arg or 0)]
            built = NONE_SOURCE.union(*items)
            stack.append(built if op == "BUILD_SET" else built | SEQUENCES)
        elif op == "LOAD_CONST" and type(ins.argval) is tuple:
            stack.append(SEQUENCES)
        elif op == "TO_BOOL" or op == "UNARY_NOT":
            self.truth(self.pop(stack))
            stack.append(NONE_SOURCE)
        else:
            return super().step(ins, stack, pending)
        return stack

    def truth(self, value: frozenset[Source]) -> None:
        for kind, name in value:
            if kind == FREE:
                self.free_branches.setdefault(name, self.line)
            elif kind == PARAM:
                self.param_branches.add(name)


def _guarded_loads(instructions: list[dis.Instruction]) -> set[int]:
    """Offsets of loads that run only after `isinstance(x, (int, float, ...)) and`
    on the same variable: false for a traced value, so what follows never sees
    one (optax's `isinstance(weight_decay, (int, float)) and weight_decay ==
    0.0`)."""
    seen = [i for i in instructions if i.opname not in _TRANSPARENT]
    out: set[int] = set()
    for k, ins in enumerate(seen):
        if (ins.opname in FAST_LOADS or ins.opname in DEREF_LOADS) and _number_guarded(
            seen, k, ins
        ):
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
