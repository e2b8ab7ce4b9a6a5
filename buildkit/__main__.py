from buildkit.cli import main

raise SystemExit(main())
