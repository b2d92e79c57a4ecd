"""The leak checker: the scan for escaped tracers (`scan`, `objects`, `reach`,
`frames`, `caches`), the report (`report`), `find_leaks`/`check_leaks`
(`find`), `checking_leaks` (`checking`), `checked` (`checked`) and the
pytest plugin (`plugin`). Imports `_holders`, `_compat`, `_base`; never the
lifting machinery."""
