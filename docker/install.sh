#!/bin/sh
# Runtime stage of the image (Dockerfile), and what tests/shipping/test_image.py runs outside a
# container: install kraft-quorum with the operator extra (not the sandbox's) from WHEEL_DIR only
# (no index), then compile the byte code once so the root file system can be read-only.
#   docker/install.sh WHEEL_DIR [PYTHON]
set -eu
wheels=$1
py=${2:-python3}
"$py" -m pip install --no-cache-dir --no-index --find-links "$wheels" \
    "kraft-quorum[operator]" "dumb-init==1.2.5.post1"
"$py" -m compileall -q "$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
