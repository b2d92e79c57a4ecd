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
        positional: names of positional parameters, in order (for defaults).
        rebound: free variables the code rebinds (`nonlocal x; x = ...`).
        branched: variables (free or parameter) that feed Python control flow
            directly, such as `if b2 != 1.0:`. A float capture used this way
            cannot be traced, so it is kept static.
    """

    __slots__ = (
        "__weakref__",
        "branched",
        "code",
        "freevars",
        "hash",
        "positional",
        "rebound",
    )

    def __init__(self, code: types.CodeType) -> None:
        self.code = code
        self.hash = hash(code)
        self.freevars = code.co_freevars
        npos = code.co_argcount + code.co_posonlyargcount
        self.positional = code.co_varnames[:npos]
        freevars = set(code.co_freevars)
        rebound = {
            i.argval
            for i in dis.get_instructions(code)
            if i.opname in _STORES and i.argval in freevars
        }
        branched = _direct_branched(code)
        # Functions defined inside this one (created at call time) branch on the
        # variables they share with it; those count as branched here too.
        stack = [c for c in code.co_consts if isinstance(c, types.CodeType)]
        while stack:
            inner = stack.pop()
            branched.update(_direct_branched(inner) & set(inner.co_freevars) & freevars)
            stack.extend(c for c in inner.co_consts if isinstance(c, types.CodeType))
        self.rebound = frozenset(rebound)
        self.branched = frozenset(branched)


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
                o.argval for o in instructions[k - 3 : k - 1] if o.opname in _LOADS
            )
    return branched


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
