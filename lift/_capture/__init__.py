"""The walk of what a function holds, and closure conversion.

Imports `_copies` and beneath.

- `capture`: the one entry into capture, with its options checked.
- `convert`: closure conversion (`lift.closure_convert`).
- `factories`: a defaultdict's factory, walked as a part.
- `flatten`: flattening a captured value.
- `leaves`: what the walk makes of each leaf: static, dynamic or a node.
- `program_parts`: what a traced program runs that its text hides.
- `refusals`: what capture refuses, said with the fix.
- `walk`: the walk itself, iterative.
"""
