"""What a callable or an object holds, described once: a function's
parts (`closure`), what a function holds as identities to compare later
(`state`), the standard library's holders (`stdlib`), an object's own
attributes read without running its code (`attributes`), the names of parts
(`labels`) and pytree flattening with its guards (`trees`). Every walk
(capture, leak scan, `lift.jit`'s watch, copies) asks these.
Imports `_base` and `_compat`."""
