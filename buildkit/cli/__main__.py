import sys

from buildkit.cli.program import main

sys.exit(main())
