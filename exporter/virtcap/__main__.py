"""`python -m virtcap`, as the `virtcap` console script."""

import gc

# The imports allocate hundreds of thousands of objects that live as long as the process: the
# collections they set off free nothing and cost about 8% of the CPU of starting.
gc.disable()
from virtcap.commands.main import run  # noqa: E402

gc.enable()

run()
