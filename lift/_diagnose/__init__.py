"""`lift.diff`: why two lifted objects compile apart.

Imports `_lifted` and beneath.

- `diff`: `lift.diff`, in the user's terms.
- `skeletons`: two skeletons compared node by node.
"""
