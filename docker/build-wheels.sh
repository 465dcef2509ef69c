#!/bin/sh
# Builder stage of the image (Dockerfile), and what tests/shipping/test_image.py runs outside a
# container: build the kraft-quorum wheel (its C extension compiled here) and download the wheel
# of every locked dependency of the image (docker/requirements.lock, `make lock`), each checked
# against its sha256 in the lock, into one directory with the lock beside them.
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
# the dependencies, exactly as locked: every one pinned and hashed (--require-hashes refuses a
# file whose digest is not in the lock), wheels only (a wheel's hash is what the runtime stage
# checks again; an sdist built here would not have one)
"$py" -m pip download --no-cache-dir --require-hashes --only-binary :all: --no-deps \
    --dest "$out" -r "$src/docker/requirements.lock"
cp "$src/docker/requirements.lock" "$out/requirements.lock"
