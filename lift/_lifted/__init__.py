"""The `Lifted` class and the public functions that make and change it.

Imports `_capture` and beneath.

- `lift`: `lift`, `unlift` and `is_lifted`.
- `lifted`: the `Lifted` class.
- `multisteps`: optax objects taken apart into their functions.
- `pytree`: a `Lifted` as a pytree.
- `replace`: `lift.replace`.
- `state_dict`: flax serialization of a `Lifted`.
"""
