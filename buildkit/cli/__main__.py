"""`python -m buildkit.cli`: the command line, as `python -m buildkit` runs it."""

import sys

from buildkit.cli.program import main

sys.exit(main())
