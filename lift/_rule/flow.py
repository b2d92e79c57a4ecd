"""The branch analysis: a function's bytecode, followed by its stack.

`Flow` reads one code object (CPython 3.11 to 3.13); `lift._rule.code` runs
it on each. Each stack slot holds where its value comes from: a captured
variable, a parameter, or a tuple or list the code built. A truth test of a
slot (`if`, `while`, `not`) records those variables. A subscript by a
constant (`config["anneal"]`) records the key too. Jumps are followed both
ways. Comprehensions are scoped alike, inlined (3.12+) or not (3.11).
"""

from __future__ import annotations

import dis
import types
from typing import Any, Final, TypeAlias

# What a variable is to the code reading it (PEP 709 makes a comprehension's
# variable a local of the function around it, so names alone cannot tell).
FREE: Final = "free"  # a free variable: a closure cell the function captured
PARAM: Final = "param"  # one of the function's own parameters
# (FREE or PARAM, name), or `SEQUENCE`.
Source: TypeAlias = tuple[Any, ...]
# The stack as the analysis follows it: what each slot's value comes from.
Stack: TypeAlias = list[frozenset[Source]]

FAST_LOADS: Final = frozenset(
    {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_FAST_AND_CLEAR"}
)
_FAST_PAIRS: Final = frozenset(  # 3.13's superinstructions (3.14's borrowing one)
    {"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"}
)
DEREF_LOADS: Final = frozenset(
    {"LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_DEREF"}
)
_DEREF_STORES: Final = frozenset({"STORE_DEREF", "DELETE_DEREF"})
# This interpreter's jumps (3.11 to 3.14), by name; instrumented ones never
# appear in the code `dis` reads.
_JUMPS: Final = [op for op in dis.opmap if "JUMP" in op and "INSTRUMENTED" not in op]
# Conditional jumps that test their operand's truth (`if`, `while`, `and`, `or`,
# `assert`, a ternary), and the other truth tests: 3.13's `TO_BOOL` and `not`.
# Each calls `bool()` on a traced value, which fails.
_TRUTH_JUMPS: Final = frozenset(
    op for op in _JUMPS if op.startswith("POP_JUMP") and op.endswith(("TRUE", "FALSE"))
)
_KEEPING_JUMPS: Final = frozenset({"JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"})
_NONE_JUMPS: Final = frozenset(op for op in _JUMPS if op.endswith("NONE"))
_UNCONDITIONAL: Final = frozenset(op for op in _JUMPS if "_IF_" not in op)
_FALSE_JUMPS: Final = frozenset(op for op in _JUMPS if "IF_FALSE" in op)
_ENDS: Final = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})


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


NONE_SOURCE: Final[frozenset[Source]] = frozenset()
# What a stack slot carries when its value is a tuple or list the code built or
# loaded (`(a, b)`): indexing it (`(a, b)[lr > 0.5]`) is Python selection, which
# a traced index cannot do.
SEQUENCE: Final[Source] = ("sequence", "")
SEQUENCES: Final[frozenset[Source]] = frozenset({SEQUENCE})

_LOADS: Final = FAST_LOADS | DEREF_LOADS
# Operations whose result carries what their operands came from: `lr * 2 > 1`
# branches on `lr`. (A call's result does not: `isinstance(lr, float)` is fine.)
_BINARY: Final = frozenset({"BINARY_OP", "COMPARE_OP", "CONTAINS_OP", "BINARY_SUBSCR"})
_UNARY: Final = frozenset({"UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_POSITIVE"})
_BUILDS: Final = frozenset({"BUILD_TUPLE", "BUILD_LIST", "BUILD_SET"})
# Instructions that only convert or cache and may stand between a comparison and
# its jump (3.13 adds `TO_BOOL`): skipped when reading an `isinstance` guard.
_TRANSPARENT: Final = frozenset({"TO_BOOL", "EXTENDED_ARG", "CACHE", "NOP"})


class Flow:
    """One pass over a code object's bytecode that follows its stack.

    It finds which free variables and parameters reach a truth test
    (`free_branches`, `param_branches`). It finds which free variables are
    stored to (`stores`).

    Each stack slot holds a frozenset of `Source`s: the variables its value
    was computed from. They flow through arithmetic, comparisons, subscripts
    and local variables, not through calls. A local holds what all its
    assignments stored. A tuple or list carries `SEQUENCE`. `COPY`, `SWAP`
    and `POP_TOP` move slots. Jumps carry the stack to their targets; where
    ways meet, a slot holds what each brings. Any other instruction is read
    by its stack effect, and its result holds nothing. With `through_calls`,
    its result holds all its operands held. Then `operands` records what each
    instruction popped, by offset. Exception handlers start from an empty
    stack. A second pass, when some local holds something, sees what a loop
    assigns after reading.
    """

    def __init__(self, code: types.CodeType, through_calls: bool = False) -> None:
        # (variable, *keys): the line of its first truth test.
        self.free_branches: dict[tuple[Any, ...], int] = {}
        self.param_branches: set[str] = set()
        self.through_calls = through_calls
        self.stores: set[str] = set()  # free variables stored to or deleted
        self.operands: dict[int, frozenset[Source]] = {}
        self.popped: list[frozenset[Source]] = []
        self.key: Any = None  # the constant loaded last, a dict key or index
        instructions = list(dis.get_instructions(code))
        varnames = code.co_varnames
        # The locals whose value is a `PARAM` source: the named parameters.
        self.params = frozenset(varnames[: code.co_argcount + code.co_kwonlyargcount])
        # `LOAD_DEREF`'s argument indexes the locals, then cells that are not
        # parameters, then free variables (3.11+).
        self.first_free = len(varnames) + len(set(code.co_cellvars) - set(varnames))
        self.freevars = code.co_freevars
        # The exception table (`dis` reads it on 3.11+, undocumented): each
        # entry's `start`, `end`, `target`, `depth`, `lasti`.
        entries = list(getattr(dis.Bytecode(code), "exception_entries", ()))
        self.shadowed = _comprehension_scopes(instructions, entries)
        # Loads whose value cannot be a traced one (`_guarded_loads`).
        self.guarded = _guarded_loads(instructions)
        # What each local variable was computed from, over all its assignments
        # (`k = n; while k > 0.5:`).
        self.locals: dict[str, frozenset[Source]] = {}
        # The line of the instruction read, kept from the last that has one.
        self.line = code.co_firstlineno
        self.run(instructions, entries)
        if self.locals:
            self.run(instructions, entries)

    def run(self, instructions: list[dis.Instruction], entries: list[Any]) -> None:
        # The stack each forward jump brings to its target, by offset.
        pending: dict[int, Stack] = {}
        self.pending = pending
        for entry in entries:
            pending[entry.target] = [NONE_SOURCE] * (entry.depth + 1 + int(entry.lasti))
        stack: Stack | None = []
        through_calls = self.through_calls
        popped = self.popped
        for ins in instructions:
            if ins.positions is not None and ins.positions.lineno is not None:
                self.line = ins.positions.lineno
            here = pending.pop(ins.offset, None)
            if here is not None:
                stack = _join(stack, here)
            elif stack is None:
                stack = []  # not reached by a jump followed here
            if ins.opname not in _NO_STACK:
                popped.clear()
                stack = self.step(ins, stack)
                if through_calls and popped:
                    self.operands[ins.offset] = NONE_SOURCE.union(*popped) - SEQUENCES
            constant = ins.opname == "LOAD_CONST" and type(ins.argval) in (str, int)
            self.key = ins.argval if constant else None

    def pop(self, stack: Stack) -> frozenset[Source]:
        value = stack.pop() if stack else NONE_SOURCE
        self.popped.append(value)
        return value

    def step(self, ins: dis.Instruction, stack: Stack) -> Stack | None:
        """`stack` after `ins` (`None` where control does not fall through)."""
        op = ins.opname
        if op in _BINARY:
            right, left = self.pop(stack), self.pop(stack)
            subscript = op == "BINARY_SUBSCR" or ins.argrepr == "[]"  # 3.14's
            if SEQUENCE in left and subscript:
                self.truth(right)
            elif subscript and self.key is not None and not self.through_calls:
                # `config["anneal"]`: that entry, not the whole variable.
                left = frozenset((*s, self.key) if s[0] == FREE else s for s in left)
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
        elif op in FAST_LOADS:
            guarded = op == "LOAD_FAST_AND_CLEAR" or ins.offset in self.guarded
            stack.append(NONE_SOURCE if guarded else self.fast(ins.argval, ins.offset))
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
        elif op in DEREF_LOADS:
            if op == "LOAD_FROM_DICT_OR_DEREF":
                self.pop(stack)
            free = self.free(ins)
            if ins.offset in self.guarded:
                stack.append(NONE_SOURCE)
            elif free is not None:
                stack.append(frozenset({(FREE, free)}))
            else:
                stack.append(self.fast(ins.argval, ins.offset))
        elif op in _DEREF_STORES:
            free = self.free(ins)
            value = self.pop(stack) if op == "STORE_DEREF" else NONE_SOURCE
            if free is not None:
                self.stores.add(free)
            else:
                self.store(ins.argval, value)  # a cell of the code's own
        elif op == "COPY":
            n = ins.arg or 1
            stack.append(stack[-n] if len(stack) >= n else NONE_SOURCE)
        elif op == "SWAP":
            n = ins.arg or 2
            if len(stack) >= n:
                stack[-1], stack[-n] = stack[-n], stack[-1]
        elif op == "POP_TOP":
            self.pop(stack)
        elif op in _TRUTH_JUMPS or op in _NONE_JUMPS or op in _KEEPING_JUMPS:
            value = self.pop(stack)
            if op not in _NONE_JUMPS:
                self.truth(value)
            self.carry(ins, [*stack, value] if op in _KEEPING_JUMPS else stack)
        elif op in _UNCONDITIONAL:
            self.carry(ins, stack)
            return None
        elif op in _ENDS:
            return None
        else:
            self.generic(ins, stack)
        return stack

    def fast(self, name: str, offset: int) -> frozenset[Source]:
        """What a local holds: what was assigned to it, and its parameter.

        A comprehension inlined there (3.12+) may shadow the parameter.
        """
        assigned = self.locals.get(name, NONE_SOURCE)
        if name in self.params and not any(
            name in names and start <= offset < end
            for start, end, names in self.shadowed
        ):
            return assigned | {(PARAM, name)}
        return assigned

    def store(self, name: str, value: frozenset[Source]) -> None:
        if value:
            self.locals[name] = self.locals.get(name, NONE_SOURCE) | value

    def free(self, ins: dis.Instruction) -> str | None:
        """The free variable a `*_DEREF` instruction reads or writes, if any.

        A cell of the code's own is not one.
        """
        k = (ins.arg or 0) - self.first_free
        return self.freevars[k] if 0 <= k < len(self.freevars) else None

    def truth(self, value: frozenset[Source]) -> None:
        """A value whose truth Python tests (`if`, `while`, `and`, `not`)."""
        for kind, name, *path in value:
            if kind == FREE:
                self.free_branches.setdefault((name, *path), self.line)
            elif kind == PARAM:
                self.param_branches.add(name)

    def carry(self, ins: dis.Instruction, stack: Stack) -> None:
        """Record the stack a forward jump brings to its target."""
        target = ins.argval
        if type(target) is not int or target <= ins.offset:
            return  # a loop's back edge: its head was read already
        self.pending[target] = _join(self.pending.get(target), list(stack))

    def generic(self, ins: dis.Instruction, stack: Stack) -> None:
        """An instruction read by its stack effect only.

        Its result holds nothing: a call, an attribute, a container. With
        `through_calls`, it holds all the instruction popped.
        """
        # Every instruction `dis` yields has one (3.11 to 3.13): only 3.12's
        # pseudo-instructions and instrumented ones refuse, never in `co_code`.
        effect = dis.stack_effect(ins.opcode, ins.arg, jump=False)
        if effect > 0:
            stack.extend([NONE_SOURCE] * effect)
        else:
            start = max(0, len(stack) - (1 - effect))
            taken = stack[start:] if self.through_calls else []
            del stack[start:]
            self.popped.extend(taken)
            stack.append(NONE_SOURCE.union(*taken))
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            jumped = dis.stack_effect(ins.opcode, ins.arg, jump=True)
            depth = max(0, len(stack) - effect + jumped)
            carried = stack[:depth] + [NONE_SOURCE] * (depth - len(stack))
            self.carry(ins, carried)


def _join(stack: Stack | None, other: Stack) -> Stack:
    """Where two ways meet: each slot holds what either brings.

    A stack of another depth (or none) gives way to `other`."""
    if stack is None or len(stack) != len(other):
        return other
    return [a | b for a, b in zip(stack, other, strict=True)]


def _comprehension_scopes(
    instructions: list[dis.Instruction], entries: list[Any]
) -> list[tuple[int, int, frozenset[str]]]:
    """The ranges of comprehensions inlined into `code`, with what each shadows.

    This is 3.12+ (PEP 709). A comprehension's range is what its exception
    handler covers. The handler's `STORE_FAST`s restore the variables that
    `LOAD_FAST_AND_CLEAR` saved.
    """
    saved = {i.argval for i in instructions if i.opname == "LOAD_FAST_AND_CLEAR"}
    if not saved:
        return []
    by_offset = {i.offset: k for k, i in enumerate(instructions)}
    out: list[tuple[int, int, frozenset[str]]] = []
    for entry in entries:  # a handler's target is an instruction's offset
        restored: set[str] = set()
        # The restores are never fused into `STORE_FAST_STORE_FAST` (3.13).
        for ins in instructions[by_offset[entry.target] :]:
            if ins.opname == "STORE_FAST":
                restored.add(ins.argval)
            elif ins.opname not in ("SWAP", "POP_TOP", "NOP"):
                break
        if restored and restored <= saved:
            out.append((entry.start, entry.end, frozenset(restored)))
    return out


def _guarded_loads(instructions: list[dis.Instruction]) -> set[int]:
    """Offsets of loads guarded by `isinstance(x, (int, float, ...)) and`.

    The guard is on the same variable, and is false for a traced value. So
    what follows never sees one. optax writes `isinstance(weight_decay, (int,
    float)) and weight_decay == 0.0`.
    """
    seen = [i for i in instructions if i.opname not in _TRANSPARENT]
    return {
        ins.offset
        for k, ins in enumerate(seen)
        if ins.opname in _LOADS and _number_guarded(seen, k, ins)
    }


# The names a number guard loads: `int`, `numbers.Real`.
_NAME_LOADS: Final = frozenset({"LOAD_GLOBAL", "LOAD_ATTR"})
_NUMBER_TYPES: Final = frozenset(
    {"int", "float", "complex", "bool", "numbers", "Number", "Real"}
)


def _number_guarded(
    instructions: list[dis.Instruction], start: int, load: dis.Instruction
) -> bool:
    """Whether the comparison at `start` runs only after a number guard.

    The guard is `isinstance(x, (int, float, ...)) and ...` on the same
    variable (`_guarded_loads`).
    """
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
                or (i.opname in _NAME_LOADS and i.argval in _NUMBER_TYPES)
                for i in window[j + 2 :]
            )
    return False
