"""kraft.cli: the `kraft` command line, every command, and the tools they run.

- `kraft.cli.table`: the command table (`Command`, `register`) and the exit codes; every
  command module registers into it, and `kraft.cli.main` builds its parser from it.
- `kraft.cli.main`: `main` (the `kraft` console script, `python -m kraft`), `format`,
  `random-uuid`, `dump`, `recover`, and the plugins loaded by name (`PLUGIN_MODULES`).
- `kraft.cli.node`: `run`, `quorum ...` and `local`; `kraft.cli.quorum`: what `kraft quorum`
  asks (through `kraft.admin.QuorumClient`) and prints.
- `kraft.cli.recover`, `kraft.cli.dump`: the offline tools on a stopped node's files.
- `kraft.cli.local`: a quorum of real `kraft run` processes on loopback (`kraft local`, the
  demo, the process tests); `kraft.cli.demo`: `make demo-nodes`.
"""
