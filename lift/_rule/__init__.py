"""Is this leaf static or dynamic? The one static rule.

Imports `_leaks` and beneath.

- `code`: what a code object tells, once per code object.
- `floats`: Python scalars as weakly typed arrays, converted once.
- `flow`: the branch analysis of a function's bytecode.
- `hidden`: a tracer no pytree reaches.
- `scope`: which captures a `dynamic=` name covers.
- `static`: the static rule, and what equal means for a static value.
"""
