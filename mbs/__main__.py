"""``python -m mbs`` runs the command line (same as the ``mbs`` console script)."""

import sys

from mbs.cli import main

sys.exit(main())
