"""`python -m kraft` runs the `kraft` command line."""

import sys

from kraft.cli import main

sys.exit(main())
