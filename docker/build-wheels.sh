#!/bin/sh
# Builder stage of the image (Dockerfile), and what tests/shipping/test_image.py runs outside a
# container: build the kraft-quorum wheel (its C extension compiled here) and the wheels of every
# dependency of the image, into one directory.
#   docker/build-wheels.sh SOURCE_DIR WHEEL_DIR [PYTHON]
set -eu
src=$1
out=$2
py=${3:-python3}
# The image holds no sandbox (sandbox/, a test world) and none of its dependencies: the build
# context has no sandbox/ (.dockerignore), so setup.py leaves `kraft_sandbox` and its command out.
if [ -d "$src/sandbox" ]; then
    echo "build-wheels.sh: $src has sandbox/; the image's wheel is built without it" >&2
    exit 1
fi
mkdir -p "$out"
# the project's own wheel; a failed C build fails the image (KRAFT_REQUIRE_LANE)
KRAFT_REQUIRE_LANE=1 "$py" -m pip wheel --no-cache-dir --no-deps --wheel-dir "$out" "$src"
# the dependencies of the operator extra and the init process, as wheels
"$py" -m pip wheel --no-cache-dir --wheel-dir "$out" --find-links "$out" \
    "kraft-quorum[operator]" "dumb-init==1.2.5.post1"
