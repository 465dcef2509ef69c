"""`python -m kraft.sim`: run simulated seeds (see `kraft.sim.cli`)."""

from kraft.sim.cli import main

raise SystemExit(main())
