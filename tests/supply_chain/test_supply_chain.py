"""The image's supply chain: the lock file (docker/requirements.lock, `make lock`) pins every
runtime requirement with hashes, the image's build steps install it with --require-hashes and
its base images by digest, the SBOM (`make sbom`) is valid CycloneDX and lists exactly the
locked packages, and the kubectl/helm wheel the tests run is pinned by its sha256.

The build steps themselves run in tests/shipping/test_image.py (which installs from the lock
with --require-hashes, so a lock missing a transitive dependency fails there)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# the SBOM is made once, on one worker
pytestmark = pytest.mark.xdist_group("supply_chain")

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "docker" / "requirements.lock"
CYCLONEDX = ROOT / ".tools" / "cyclonedx" / "bin"
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


def locked() -> dict[str, tuple[str, list[str], str | None]]:
    """name -> (version, hashes, marker) of each requirement in the lock."""
    text = LOCK.read_text()
    entries: dict[str, tuple[str, list[str], str | None]] = {}
    # one requirement per logical line: backslash continuations joined, comments dropped
    for raw in re.sub(r"\\\n", " ", text).splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        assert not line.startswith("-") or line.startswith("--hash"), \
            f"an option in the lock (an index or links would change where files come from): {line}"
        spec, *hashes = line.split(" --hash=")
        req = Requirement(spec.strip())
        assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", line
        entries[canonicalize_name(req.name)] = (
            next(iter(req.specifier)).version, [f"--hash={h.strip()}" for h in hashes],
            str(req.marker) if req.marker else None)
    return entries


def runtime_requirements() -> list[Requirement]:
    """What the image installs by name: kraft-quorum's dependencies, its operator extra, and
    docker/requirements-image.in."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    image_in = [line.split("#", 1)[0].strip() for line in
                (ROOT / "docker" / "requirements-image.in").read_text().splitlines()]
    wanted = project["dependencies"] + project["optional-dependencies"]["operator"] + \
        [r for r in image_in if r]
    return [Requirement(r) for r in wanted]


def test_the_lock_pins_every_runtime_requirement_with_hashes() -> None:
    lock = locked()
    assert "kraft-quorum" not in lock  # the project's own wheel is built, not downloaded
    for req in runtime_requirements():
        name = canonicalize_name(req.name)
        assert name in lock, f"{req} is not in {LOCK.name}: run `make lock`"
        version, _hashes, marker = lock[name]
        assert req.specifier.contains(Version(version), prereleases=True), \
            f"{LOCK.name} pins {name}=={version}, outside {req}: run `make lock`"
        if req.marker is not None:  # uvloop: not on Windows, as pyproject.toml says
            assert marker is not None
    for name, (_version, hashes, _marker) in lock.items():
        assert hashes, f"{name} has no hash"
        assert all(HASH.match(h) for h in hashes), (name, hashes)
    # the sandbox's packages stay out of the image
    assert not {"kmock", "jsonschema", "cel-python", "kubernetes-validate"} & set(lock)


def test_every_line_of_the_lock_is_a_pin_a_hash_or_a_comment() -> None:
    for number, line in enumerate(LOCK.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        body = stripped.removesuffix("\\").strip()
        assert HASH.match(body) or re.match(r"^[A-Za-z0-9._-]+==[^ ]+( ;.*)?$", body), \
            f"{LOCK.name}:{number}: {line!r}"


def test_the_image_installs_the_lock_with_hashes_and_pulls_bases_by_digest() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert len(froms) == 2
    for image in froms:
        assert re.fullmatch(r"python:3\.11\.\d+-(slim-)?bookworm@sha256:[0-9a-f]{64}", image), \
            image
    # what the digests are and are not is said where they are
    assert "NOT VERIFIED" in dockerfile
    build = (ROOT / "docker" / "build-wheels.sh").read_text()
    install = (ROOT / "docker" / "install.sh").read_text()
    assert "--require-hashes" in build and "docker/requirements.lock" in build
    assert "--only-binary :all:" in build and "--only-binary :all:" in install
    assert "--require-hashes" in install and "requirements.lock" in install
    assert "--no-index" in install and "pip check" in install
    # no install step names a package outside the lock
    assert "dumb-init" not in build + install


def test_the_wheel_of_kubectl_and_helm_is_pinned_by_its_hash(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import k8s_bins
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert re.fullmatch(r"[0-9a-f]{64}", k8s_bins.WHEEL_SHA256)
    source = (ROOT / "tools" / "k8s_bins.py").read_text()
    assert '"--require-hashes"' in source
    forged = tmp_path / f"{k8s_bins.WHEEL_PROJECT.replace('-', '_')}-{k8s_bins.WHEEL_VERSION}" \
                        "-py3-none-any.whl"
    forged.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip: a wheel, but not that one
    with pytest.raises(k8s_bins.FetchError, match="is not the pinned"):
        k8s_bins.verified(forged)
    assert k8s_bins.main([str(tmp_path / "bin"), "--wheel", str(forged)]) == 1
    assert not (tmp_path / "bin" / "kubectl").exists()


def _cyclonedx() -> Path:
    tool = CYCLONEDX / "cyclonedx-py"
    if not tool.exists():
        pytest.fail("no cyclonedx-py: run `make supply-chain-tools` (make test installs it)")
    return tool


VALIDATE = (
    "import sys\n"
    "from cyclonedx.schema import SchemaVersion\n"
    "from cyclonedx.validation.json import JsonStrictValidator\n"
    "validator = JsonStrictValidator(SchemaVersion.V1_6)\n"
    "for path in sys.argv[1:]:\n"
    "    error = validator.validate_str(open(path).read())\n"
    "    print(f'{path}: {error or \"valid\"}'.replace('\\n', ' '))\n")
"""Each file checked against CycloneDX 1.6's JSON schema by cyclonedx-python-lib's own
validator (the schema files it ships): one line per file, `PATH: valid` or the error."""


@dataclass(frozen=True)
class Sbom:
    path: Path
    verdicts: dict[str, str]  # "made", "broken": the validator's line for each


@pytest.fixture(scope="module")
def sbom(tmp_path_factory: pytest.TempPathFactory) -> Sbom:
    """The SBOM as `make sbom` writes it (the same command, into a temporary file, its own
    validation left to the validator below), and the validator's verdict on it and on a
    broken copy."""
    tmp = tmp_path_factory.mktemp("sbom")
    out = tmp / "kraft-quorum.cdx.json"
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nsbom:", 1)[1].split("\n\n", 1)[0]
    assert "cyclonedx-py requirements" in recipe and "--validate" in recipe
    done = subprocess.run(
        [str(_cyclonedx()), "requirements", "--pyproject", "pyproject.toml", "--spec-version",
         "1.6", "--output-format", "JSON", "--output-reproducible", "--no-validate",
         "--output-file", str(out), str(LOCK)], cwd=ROOT, capture_output=True, text=True,
        check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    doc["components"][0].pop("name")
    doc["components"][1]["type"] = "not-a-type"
    broken = tmp / "broken.cdx.json"
    broken.write_text(json.dumps(doc))
    checked = subprocess.run([str(CYCLONEDX / "python"), "-c", VALIDATE, str(out), str(broken)],
                             capture_output=True, text=True, check=False, timeout=300)
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    assert len(lines) == 2, checked.stdout
    return Sbom(out, {"made": lines[0].split(": ", 1)[1], "broken": lines[1].split(": ", 1)[1]})


def test_the_sbom_is_valid_cyclonedx_and_lists_the_runtime_packages(sbom: Sbom) -> None:
    assert sbom.verdicts["made"] == "valid"
    doc = json.loads(sbom.path.read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    root = doc["metadata"]["component"]
    assert (root["name"], root["version"]) == ("kraft-quorum", "0.1.0")
    listed = {canonicalize_name(c["name"]): c for c in doc["components"]}
    lock = locked()
    assert set(listed) == set(lock)
    for name, (version, hashes, _marker) in lock.items():
        component = listed[name]
        assert component["version"] == version
        assert component["purl"] == f"pkg:pypi/{name}@{version}"
        # the lock's hashes carried into the SBOM
        digests = {h["content"] for ref in component.get("externalReferences") or []
                   for h in ref.get("hashes") or [] if h["alg"] == "SHA-256"}
        assert digests == {h.removeprefix("--hash=sha256:") for h in hashes}, name


def test_the_validator_refuses_a_broken_sbom(sbom: Sbom) -> None:
    """The check above can fail: a component without a name or with an unknown type is
    refused by the same validator."""
    assert sbom.verdicts["broken"] != "valid"
    assert "name" in sbom.verdicts["broken"] or "type" in sbom.verdicts["broken"]
