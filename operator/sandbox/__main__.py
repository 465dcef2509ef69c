"""`python -m kraft_operator.sandbox ...`: the `kraft-sandbox` command."""

from kraft_operator.sandbox.cli import main

raise SystemExit(main())
