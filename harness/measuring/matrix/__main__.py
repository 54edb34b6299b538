"""``python -m harness.measuring.matrix``: the same command as ``python -m harness matrix``."""

import sys

from harness.measuring.matrix.cli import main

sys.exit(main())
