"""`python -m kraft` runs the `kraft` command line."""

import sys

from kraft.cli.main import main

sys.exit(main())
