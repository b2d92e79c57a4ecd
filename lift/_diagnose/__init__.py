"""`lift.diff`: why two lifted objects compile separately.
Imports `_capture` and beneath."""
