"""`lift.diff`: why two lifted objects compile separately; `lift.stack`: a
population of them as one pytree, or `lift.diff`'s reason why not.
Imports `_capture` and beneath."""
