"""The leak checker. Imports `_holders`, `_compat` and `_base`.

The verdict comes from JAX's own signal; the walks name the holder.

- `caches`: the caches a leak may sit in, and whose they are.
- `chain`: the referrer chain, where no walk names a holder.
- `checked`: `lift.checked`, a transform that scans what its call left.
- `checking`: `lift.checking_leaks`, the context manager.
- `find`: `find_leaks` and `check_leaks`.
- `frames`: the look at the user's frames where JAX's check fails a trace.
- `objects`: how the scan opens an object `held` does not describe.
- `phase`: one test phase under the plugin, and the check after it.
- `plugin`: the pytest plugin (`--lift-leaks`).
- `report`: `Leak`, `Leaks` and the report's text.
- `scan`: the walk for escaped tracers.
- `verdict`: a trace alive at JAX's check is a leak.
"""
