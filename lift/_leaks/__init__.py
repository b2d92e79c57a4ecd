"""The leak checker: the fast mode's verdict from JAX's own signal, named by
the walks (`verdict`); the scan for escaped tracers (`scan`, `objects`), the
look at the user's frames as a trace exits (`frames`), the caches that keep
tracers (`caches`); the report (`report`); `find_leaks`/`check_leaks`
(`find`), `checking_leaks` (`checking`), `checked` (`checked`), and the
pytest plugin (`plugin`, its phases in `phase`). Imports `_holders`,
`_compat`, `_base`; never the lifting machinery."""
