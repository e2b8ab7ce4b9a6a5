"""`python -m buildkit`: the command line, as the `buildkit` console script runs it."""

from buildkit.cli import main

raise SystemExit(main())
