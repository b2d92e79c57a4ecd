"""`lift.jit`: programs keyed on code. Imports `_lifted` and beneath.

- `aot`: ahead-of-time stages (`trace`, `lower`, `compile`).
- `function`: `lift.jit` itself, and its function: its call and its cached
  call, bound to an instance too.
- `options`: `jax.jit`'s options, checked and translated.
- `programs`: the programs shared per code object and options.
- `verify`: every fast path checked against the full walk.
- `watch`: whether the captures are still what was lifted.
"""
