"""The base every other part stands on. Imports nothing of lift's.

- `atoms`: the types whose values hold nothing.
- `built`: a weak record of the `Lifted` built while someone listens.
- `caches`: lift's caches and their two eviction policies.
- `errors`: lift's exceptions and how messages name things.
- `explain`: `python -m lift explain`, the Errors page offline.
- `gc`: Python's cyclic collector held off around bulk work.
- `owners`: whose code is whose, by module name.
- `routes`: the fixes messages give for libraries' objects.
"""
