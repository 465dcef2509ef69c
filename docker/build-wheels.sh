#!/bin/sh
# Builder stage of the image (Dockerfile), and what tests/shipping/test_image.py runs outside a
# container: build the kraft-quorum wheel (its C extension compiled here) and the wheels of every
# dependency of the image, into one directory.
#   docker/build-wheels.sh SOURCE_DIR WHEEL_DIR [PYTHON]
set -eu
src=$1
out=$2
py=${3:-python3}
mkdir -p "$out"
# the project's own wheel; a failed C build fails the image (KRAFT_REQUIRE_LANE)
KRAFT_REQUIRE_LANE=1 "$py" -m pip wheel --no-cache-dir --no-deps --wheel-dir "$out" "$src"
# the dependencies of the operator extra and the init process, as wheels
"$py" -m pip wheel --no-cache-dir --wheel-dir "$out" --find-links "$out" \
    "kraft-quorum[operator]" "dumb-init==1.2.5.post1"
