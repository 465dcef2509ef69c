"""`python -m kraft_sandbox ...`: the `kraft-sandbox` command."""

from kraft_sandbox.cli import main

raise SystemExit(main())
