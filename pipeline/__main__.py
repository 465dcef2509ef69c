"""`python -m kraft_pipeline ...` and `spark-submit pipeline/__main__.py ...`: the audit CLI."""

from __future__ import annotations

import sys

from kraft_pipeline.audit import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
