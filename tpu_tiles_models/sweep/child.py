"""`python -m tpu_tiles_models.sweep.child SPEC OUTCOME`: one point, in its own process.

The worker starts it for each point under `--isolation process` (see `worker.child_main`).
"""

from __future__ import annotations

import sys

from tpu_tiles_models.sweep.worker import child_main

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
