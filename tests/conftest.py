"""Test environment: eight CPU devices and JAX's own tracer-leak checking.

`scripts/test.sh` sets the same variables; setting them here too keeps a bare
`pytest` run honest. Both must happen before JAX is imported.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_CHECK_TRACER_LEAKS", "1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
