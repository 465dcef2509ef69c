#!/bin/sh
# Runtime stage of the image (Dockerfile), and what tests/shipping/test_image.py runs outside a
# container: install the locked dependencies from WHEEL_DIR only (no index), each wheel checked
# against its sha256 in WHEEL_DIR/requirements.lock, then kraft-quorum's own wheel (built in the
# builder stage, so it has no hash in the lock) without resolving anything more; `pip check`
# fails the build when the lock does not satisfy kraft-quorum[operator]. Then compile the byte
# code once so the root file system can be read-only.
#   docker/install.sh WHEEL_DIR [PYTHON]
set -eu
wheels=$1
py=${2:-python3}
"$py" -m pip install --no-cache-dir --no-index --find-links "$wheels" --require-hashes \
    --only-binary :all: -r "$wheels/requirements.lock"
"$py" -m pip install --no-cache-dir --no-index --no-deps "$wheels"/kraft_quorum-*.whl
"$py" -m pip check
"$py" -m compileall -q "$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
