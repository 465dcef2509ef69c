#!/usr/bin/env bash
# Installs the peers that `python -m bench compare` measures kraft-quorum against (idempotent).
#
#   * etcd 3.4: Debian's etcd-server / etcd-client packages (apt; needs root). Without systemd
#     the package's own service is not started; the benchmark starts its own members on
#     127.0.0.1 ports of its choosing and never uses the default 2379/2380.
#   * .venv-peers/: a separate virtualenv (kept out of the project's .venv) with
#       pysyncobj==0.3.17                 the PySyncObj peer (a library: it runs inside its nodes)
#       etcd3==0.12.0 protobuf==3.20.3 grpcio==1.85.1
#                                         only for etcd3's generated gRPC stubs: the etcd driver
#                                         speaks etcd's native gRPC API, as a Python user would.
#     (etcd3 0.12.0 ships protoc-3.x generated code, so protobuf must stay below 4.)
#
# Usage: bash bench/systems/setup_peers.sh
#   from the repository root; PEERS_VENV overrides the path, PYTHON the interpreter (`make bench`
#   passes .venv's)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${PEERS_VENV:-$ROOT/.venv-peers}
PYTHON=${PYTHON:-python3}

if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  if [ "$(id -u)" != "0" ]; then
    echo "etcd is missing and this is not root: run 'apt-get install -y etcd-server etcd-client' as root" >&2
    exit 1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server etcd-client
fi

# A peers venv made with another interpreter than the one asked for is made again: PySyncObj
# must run on the same build as kraft-quorum (interpreter builds differ widely in speed).
want_py=$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')
if [ -x "$VENV/bin/python" ]; then
  have_py=$("$VENV/bin/python" -c 'import os, sys; print(os.path.realpath(sys._base_executable))')
  if [ "$have_py" != "$want_py" ]; then
    echo "peers venv $VENV was made with $have_py, not $want_py: making it again"
    rm -rf "$VENV"
  fi
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
want="pysyncobj==0.3.17 etcd3==0.12.0 protobuf==3.20.3 grpcio==1.85.1"
if ! "$VENV/bin/python" - <<'EOF' >/dev/null 2>&1
import importlib.metadata as md
need = {"pysyncobj": "0.3.17", "etcd3": "0.12.0", "protobuf": "3.20.3", "grpcio": "1.85.1"}
assert all(md.version(k) == v for k, v in need.items())
EOF
then
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet $want
fi
"$VENV/bin/python" -c "import pysyncobj, etcd3, grpc; print('peers venv ok:', '$VENV')"
# sed reads all of it: `head -1` exits first, and etcd's SIGPIPE fails the pipe under pipefail
etcd --version | sed -n 1p
