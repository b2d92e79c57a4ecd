"""`lift.diff` and `lift.stack`: lifted objects compared.

Imports `_lifted` and beneath.

- `diff`: `lift.diff`, why two lifted objects compile apart; `lift.stack`, a
  population as one pytree, or why not.
- `skeletons`: two skeletons compared node by node.
"""
