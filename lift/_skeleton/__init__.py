"""What a treedef records: the skeleton, its nodes, names and rebuilds.

Imports `_rule` and beneath.

- `nodes`: what the walk records for each holder it meets.
- `paths`: where each leaf sits, as key paths.
- `rebuild`: plain functions made afresh from a skeleton and leaves.
- `repr`: a `Lifted` as people read it.
- `shared`: the parts of skeletons fresh lifts of small graphs share.
- `skeleton`: the static half of a lifted function, and a `Lifted`'s accessors.
"""
