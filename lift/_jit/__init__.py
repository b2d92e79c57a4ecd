"""`lift.jit`: programs keyed on code (`programs`), the call that reads
captures as Python would (`function`, `watch`; a method bound to an
instance: `bound`), ahead-of-time lowering (`aot`) and jit's options
(`options`). Imports `_capture` and beneath."""
