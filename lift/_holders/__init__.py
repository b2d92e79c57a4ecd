"""What a callable or an object holds, described once.

Every walk (capture, leak scan, `lift.jit`'s watch, copies) asks these.
Imports `_base` and `_compat`.

- `attributes`: an object's own attributes, read without running its code.
- `closure`: a function's parts (cells, defaults, attributes, partials).
- `held`: what anything holds, each part labelled; every walk reads it.
- `labels`: how a part of a holder is named.
- `reach`: the one walk of containers; each caller gives its policy.
- `stdlib`: the standard library's holders that are not plain objects.
- `trees`: `jax.tree_util`, typed, and flattening with its guards.
"""
