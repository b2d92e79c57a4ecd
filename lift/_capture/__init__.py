"""Capturing a closure: the walk of what a function holds (`walk`,
`capture`), the static rule and its keys (`static`), the branch analysis
(`code`, `flow`), `dynamic=` names' scope (`scope`), what the walk refuses
(`refusals`), the skeleton and its nodes, rebuilding a function with new
cells and the copy check after each call (`rebuild`, `builds`, `copies`, `lazy`
(generators and coroutines), `kept` (what a traced call leaves holding a copy)), float conversion, closure conversion
(`convert`), and the `Lifted` class (`lifted`, its pytree: `pytree`)
with `lift`, `unlift`, `replace`.
Imports `_leaks` (its scan finds hidden tracers) and what is beneath it."""
