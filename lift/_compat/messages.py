"""JAX's messages and reprs, read: the only place lift parses JAX's text.

Written against jax 0.10.2, 0.8.0 and 0.12.0.1 (pinned by
`tests/compat/test_compat.py`). Where JAX offers no structured form, lift reads
its words here. Each reading has a fallback that keeps lift's own behaviour:
an error passed on unexplained, a treedef walked in full.
"""

from __future__ import annotations

import re
from typing import Any, Final

# `ConcretizationTypeError`: "... depends on the value of the argument x." (or
# "the values of the arguments a, b and c").
_DEPENDS: Final = re.compile(
    r"depends on the values? of the arguments? (.+?)\.(?:\n|$)"
)


def concretized_arguments(message: str) -> list[str] | None:
    """The argument paths JAX's concretization message says a value depended
    on, or `None` when it names none."""
    match = _DEPENDS.search(message)
    if match is None:
        return None
    return [p.strip() for p in re.split(r", | and ", match[1]) if p.strip()]


def asks_for_a_concrete_value(err: BaseException) -> bool:
    """Whether `err` (a `TypeError`) says a value was needed concrete, or that
    a tracer was used as a plain Python value (`tracer_use`).

    JAX's concretization errors say the first (`jnp.zeros((n,))` with a
    traced `n`)."""
    return "concrete value" in str(err) or tracer_use(err) is not None


def tracer_use(err: BaseException) -> str | None:
    """How Python's own error says a tracer was used as a plain value.

    - `"format"`: a `TypeError` from `f"{lr:.3g}"`. A tracer formats only
      without a spec.
    - `"hash"`: a `TypeError` from a dict key, a set member or
      `functools.cache`. A concrete array cannot be hashed either.
    - `"method"`: an `AttributeError` for a method of Python's numbers that
      arrays lack (`lr.is_integer()`).

    Else `None`."""
    text = str(err)
    if "Tracer" not in text and "ArrayImpl" not in text:  # (a concrete array's)
        return None
    if isinstance(err, AttributeError):
        return "method" if number_method(err) else None
    if text.startswith("unsupported format string passed to"):
        return "format"
    if text.startswith("unhashable type"):
        return "hash"
    return None


# Methods of Python's numbers that JAX's arrays do not have.
_NUMBER_METHODS: Final = frozenset(
    n for t in (int, float, complex) for n in dir(t) if not n.startswith("_")
) - {"real", "imag", "conjugate"}


def number_method(err: AttributeError) -> str | None:
    """The method of Python's numbers an `AttributeError` of an array or tracer
    names, or `None`.

    jaxlib 0.8 to 0.12 say `'ArrayImpl' object has no attribute 'is_integer'`
    or `DynamicJaxprTracer has no attribute is_integer`."""
    # Set by Python's own attribute lookup (3.10 and later), also when JAX's
    # `Tracer.__getattr__` raises the error without it.
    name = getattr(err, "name", None)
    return name if name in _NUMBER_METHODS else None


def is_signature_mismatch(err: BaseException) -> bool:
    """Whether `err` is a compiled program called with arguments of another
    structure ("Function compiled with input pytree does not match ...")."""
    return str(err).startswith("Function compiled")


def has_custom_nodes(treedef: Any) -> bool:
    """Whether `treedef` has a node of a type registered with `jax.tree_util`
    (its repr names each such node `CustomNode`): only those carry static data."""
    return "CustomNode" in str(treedef)


def treedef_text(treedef: Any) -> str:
    """`treedef`'s structure as its repr spells it, without `PyTreeDef(...)`."""
    return str(treedef).removeprefix("PyTreeDef(").removesuffix(")")


# `jax.jit` called with a value it cannot take as an argument: "Error
# interpreting argument to <fn> as an abstract array. The problematic value is
# of type <class 'str'> and was passed to the function at path x."
_BAD_ARGUMENT: Final = re.compile(
    r"^Error interpreting argument to .* The problematic value is of type "
    r"<class '(?P<type>[^']+)'> and was passed to the function at path (?P<path>\S+)\."
)


def bad_argument(err: BaseException) -> tuple[str, str] | None:
    """`(type name, argument path)` of the value `jax.jit` could not take as an
    argument, if `err` says so."""
    match = _BAD_ARGUMENT.match(str(err))
    return None if match is None else (match["type"], match["path"])


def is_unhashable_static(err: BaseException) -> bool:
    """Whether `err` is `jax.jit`'s refusal of an unhashable static argument."""
    return str(err).startswith("Non-hashable static arguments")


def leaked_tracer_text(exc: BaseException) -> str:
    """What JAX's leak report says of the tracer: its second line ("Leaked
    trace ...", then the tracer and what refers to it), or the first."""
    lines = [line for line in str(exc).split("\n") if line.strip()]
    return (lines[1] if len(lines) > 1 else (lines[0] if lines else "a tracer")).strip()
