"""Side effects on captures: what stays the user's own, and the copies.

Imports `_skeleton` and beneath.

- `callbacks`: a callback a traced call leaves holding a copy.
- `calls`: the function a call runs, and the check after it.
- `copies`: the lists and dicts a rebuilt function holds as copies.
- `generators`: generators and coroutines, checked when they finish.
- `own`: the containers that stay the user's own objects.
"""
