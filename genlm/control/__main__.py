"""`python -m genlm.control` runs the command line."""

import sys

from genlm.control.cli import main

sys.exit(main())
