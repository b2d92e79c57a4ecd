"""What a code object tells us once, cached for every function that shares it.

Reading bytecode is slow (tens of microseconds); lifting a fresh closure of a
code object already seen is the common case in a sweep. So the analysis is done
once per code object and kept, weakly, in a dict keyed by `id(code)`.
"""

from __future__ import annotations

import dis
import threading
import types
import weakref
from collections import deque
from typing import Final

from ._closure import CELL, Label

__all__ = ["CodeInfo", "code_info"]

_LOADS: Final = frozenset(
    {"LOAD_DEREF", "LOAD_CLOSURE", "LOAD_FAST", "LOAD_CLASSDEREF"}
)
_STORES: Final = frozenset({"STORE_DEREF", "DELETE_DEREF"})
_CONDITIONAL: Final = frozenset(
    {
        "POP_JUMP_IF_TRUE",
        "POP_JUMP_IF_FALSE",
        "POP_JUMP_FORWARD_IF_TRUE",
        "POP_JUMP_FORWARD_IF_FALSE",
        "POP_JUMP_BACKWARD_IF_TRUE",
        "POP_JUMP_BACKWARD_IF_FALSE",
        "JUMP_IF_TRUE_OR_POP",
        "JUMP_IF_FALSE_OR_POP",
        "UNARY_NOT",
    }
)
# Instructions that only convert or cache and may stand between a comparison and
# its jump (3.13 adds `TO_BOOL`).
_TRANSPARENT: Final = frozenset({"TO_BOOL", "EXTENDED_ARG", "CACHE", "NOP"})


class CodeInfo:
    """Facts about one code object that `lift` needs on every capture.

    Attributes:
        code: the code object.
        hash: `hash(code)`, computed once (CPython recomputes it on every call).
        freevars: `co_freevars`, in cell order.
        cell_labels: the `Label` of each cell, in cell order.
        rebound: free variables the code rebinds (`nonlocal x; x = ...`).
        branched: variables (free or parameter) that feed Python control flow
            directly, such as `if b2 != 1.0:`, here or in a function defined
            inside this one that shares the variable. A float capture used this
            way cannot be traced, so it is kept static.
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
        freevars = set(code.co_freevars)
        instructions = list(dis.get_instructions(code))
        rebound = {
            i.argval
            for i in instructions
            if i.opname in _STORES and i.argval in freevars
        }
        branched = _direct_branched(code)
        flows = _on_params(code, branched)
        # Functions defined inside this one (created at call time) branch on the
        # variables they share with it; those count as branched here too.
        stack = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        while stack:
            inner = stack.pop()
            inner_branched = _direct_branched(inner)
            branched.update(inner_branched & set(inner.co_freevars) & freevars)
            flows = flows or _on_params(inner, inner_branched)
            stack.extend(c for c in inner.co_consts if isinstance(c, types.CodeType))
        self.rebound = frozenset(rebound)
        self.branched = frozenset(branched)
        # Variables whose capture needs more than its type read: one of both.
        self.unplain = self.branched | self.rebound
        names: set[str] = set()
        stack = [code]
        while stack:
            c = stack.pop()
            names.update(c.co_names)
            stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        self.global_names = frozenset(names)
        self.branches_on_params = flows


def _on_params(code: types.CodeType, branched: set[str]) -> bool:
    nparams = code.co_argcount + code.co_kwonlyargcount
    return bool(branched.intersection(code.co_varnames[:nparams]))


def _direct_branched(code: types.CodeType) -> set[str]:
    """Names loaded straight into a Python branch: `if b2:`, `if b2 != 1.0:`."""
    branched: set[str] = set()
    instructions = [
        i for i in dis.get_instructions(code) if i.opname not in _TRANSPARENT
    ]
    for k, ins in enumerate(instructions):
        if ins.opname not in _CONDITIONAL or k < 1:
            continue
        prev = instructions[k - 1]
        if prev.opname in _LOADS:
            branched.add(prev.argval)
        elif prev.opname == "COMPARE_OP" and k >= 3:
            # The two operands of the comparison are the two loads before it.
            branched.update(
                o.argval
                for o in instructions[k - 3 : k - 1]
                if o.opname in _LOADS and not _number_guarded(instructions, k - 3, o)
            )
    return branched


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
