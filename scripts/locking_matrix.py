"""Run locking's own tests, as the sdist carries them, against the INSTALLED wheel, on each
Python and Django the distribution claims.

    python scripts/locking_matrix.py dist/django_fenced_writes-1.0.0-py3-none-any.whl \
        dist/django_fenced_writes-1.0.0.tar.gz

`make test-locking-matrix` builds both files (`make dist`) and runs this: what it tests is
what an adopter or a packager downloads, not the checkout. For each combination it makes a
virtualenv under .local/matrix/<name> with that interpreter (found under `$(pyenv
root)/versions`, the newest patch release of each minor version), installs the wheel with
its extras, Django of the combination and the sdist's locking/tests/requirements.txt
(reused while the wheel's content and the requirements are unchanged), unpacks the sdist's
locking/tests into a temporary directory as the package `locking_tests` (so `import
locking` can only resolve to site-packages: checked before the run and by the tests'
conftest), and runs them with their own settings. The example project
(locking/tests/example_project, which knows nothing of the platform) runs the same way on
the combination that names it.

On each combination too, the quick start (docs/locking/quickstart.md) as a new adopter
takes it, timed (scripts/locking_quickstart.py): a fresh virtualenv with the wheel installed
from its file and the combination's Django, startproject, an app with a `FencedModel`,
makemigrations, makemigrations --empty + `InstallFenceGuard`, migrate, check, a first fenced
write; every command must exit 0.

Then the types, as an adopter's type checker reads the installed wheel: `mypy --strict
--disallow-any-expr` on the sdist's locking/tests/typing/consumer.py (every public name,
each in an `assert_type`), in a virtualenv of its own with the wheel, Django and the mypy
and django-stubs of requirements-dev.txt: it must pass. And the control: the same run
against a copy of the wheel without `py.typed`, which must fail, and for that reason
(mypy: "missing library stubs or py.typed marker"); a control that passes means the run
could not have failed, and fails the matrix.

The test databases (test_locking_matrix_*, test_locking_example) are the matrix's own, and
so is its Redis: a redis-server it starts on a free port and stops by its pid. Not the
worktree's, where `make test`'s pytest-xdist worker gwN has database 1 + N
(locking/tests/workers.py) and flushes it around every test: with the matrix on databases 2
and 3 of that server, a `make test` running beside it emptied them under a matrix test (a
lease gone before the child process could break it).
Exits 1 with one line per failed combination or typing step.
"""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

# Its sibling, whether this runs as a script or through runpy (tests/ops/test_locking_matrix.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from locking_quickstart import (
    QuickstartError,
    create_database,
    report,
    run_quickstart,
)

ROOT = Path(__file__).resolve().parent.parent
MATRIX_DIR = ROOT / ".local" / "matrix"
PG_PORT = os.environ.get("HOA_PG_PORT", "55432")
TYPING_TOOLS = ("mypy", "django-stubs", "django-stubs-ext")
# The lowest version of every declared dependency (pyproject.toml's lower bounds).
LOWEST = (
    "Django==5.2",
    "redis==6.0.0",
    "asgiref==3.8.1",
    "opentelemetry-api==1.27.0",
    "opentelemetry-sdk==1.27.0",
    "prometheus-client==0.20.0",
    "urllib3==2.2.0",
    "psycopg[binary]==3.2.1",
    "django-redis==5.4.0",
)


@dataclass(frozen=True)
class Combination:
    name: str
    python: str  # minor version: "3.11"
    requirements: tuple[str, ...]
    example: bool = False


# The typing run: which Python, what it installs besides the wheel (pinned in the project's
# requirements: Django as the project runs it, the type checker and Django's stubs), how
# mypy is called, and what the control's failure must say.
TYPING_PYTHON = "3.11"
TYPING_REQUIREMENTS = {"requirements.txt": ("django",), "requirements-dev.txt": TYPING_TOOLS}
MYPY = ("-m", "mypy", "--strict", "--disallow-any-expr", "--no-incremental")
NOT_TYPED = "module is installed, but missing library stubs or py.typed marker"
CONSUMER = Path("typing") / "consumer.py"

COMBINATIONS = (
    Combination("py3.11-django5.2-lowest", "3.11", LOWEST),
    Combination("py3.12-django6.0", "3.12", ("Django>=6.0,<6.1", "opentelemetry-sdk")),
    Combination("py3.13-django6.1", "3.13", ("Django>=6.1,<6.2", "opentelemetry-sdk"), True),
)


class MatrixError(Exception):
    """A step of the matrix failed; the message is the one line to print."""


def log(message: str) -> None:
    print(f"[matrix] {message}", flush=True)


def pyenv_versions() -> Path:
    try:
        root = subprocess.run(
            ["pyenv", "root"], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    return Path(root) / "versions"


def interpreter(minor: str) -> Path:
    """The newest installed patch release of Python ``minor``."""
    found = []
    for candidate in pyenv_versions().glob(f"{minor}.*"):
        match = re.fullmatch(rf"{re.escape(minor)}\.(\d+)", candidate.name)
        if match and (candidate / "bin" / "python").is_file():
            found.append((int(match.group(1)), candidate / "bin" / "python"))
    if not found:
        system = shutil.which(f"python{minor}")
        if system:
            return Path(system)
        raise MatrixError(f"no Python {minor} under {pyenv_versions()} nor on PATH")
    return max(found)[1]


def wheel_digest(wheel: Path) -> str:
    """The wheel's content (its RECORD lists every file's hash), not its build time."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD"))
        return hashlib.sha256(archive.read(record)).hexdigest()


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(arg) for arg in args], check=False, **kwargs)


def unpack_tests(sdist: Path, into: Path) -> Path:
    """Unpack the sdist's locking/tests under ``into``; return that directory."""
    with tarfile.open(sdist) as archive:
        members = [
            m for m in archive.getmembers() if m.name.split("/")[1:3] == ["locking", "tests"]
        ]
        if not members:
            raise MatrixError(f"{sdist.name} carries no locking/tests")
        archive.extractall(into, members=members, filter="data")
    top = members[0].name.split("/")[0]
    return into / top / "locking" / "tests"


def prepare_venv(combination: Combination, wheel: Path, tests: Path) -> Path:
    """A virtualenv with the wheel and the combination's requirements; reused if unchanged."""
    python = interpreter(combination.python)
    venv = MATRIX_DIR / combination.name
    requirements = (tests / "requirements.txt").read_text()
    stamp_text = json.dumps(
        [str(python), wheel_digest(wheel), combination.requirements, requirements]
    )
    stamp = venv / ".matrix-stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        log(f"{combination.name}: reusing {venv.relative_to(ROOT)}")
        return venv
    log(f"{combination.name}: creating {venv.relative_to(ROOT)} with {python}")
    shutil.rmtree(venv, ignore_errors=True)
    if run([python, "-m", "venv", venv]).returncode != 0:
        raise MatrixError(f"{combination.name}: could not create a virtualenv with {python}")
    pip = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "-q"]
    steps = (
        [*pip, "install", "--upgrade", "pip"],
        [
            *pip,
            "install",
            f"django-fenced-writes[psycopg,django-redis] @ {wheel.resolve().as_uri()}",
            *combination.requirements,
            "-r",
            tests / "requirements.txt",
        ],
    )
    for step in steps:
        result = run(step, capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write((result.stdout + result.stderr)[-5000:])
            raise MatrixError(f"{combination.name}: pip failed: {' '.join(map(str, step[3:]))}")
    stamp.write_text(stamp_text)
    return venv


def copy_tests(source: Path, target: Path, *, ignore=()) -> None:
    """Copy a test tree, naming locking's tests ``locking_tests`` instead of ``locking.tests``
    (the installed ``locking`` has no ``tests``: they are the sdist's, not the wheel's)."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *ignore))
    for path in target.rglob("*.py"):
        text = path.read_text()
        path.write_text(text.replace("locking.tests", "locking_tests"))


PYTEST_INI = """[pytest]
DJANGO_SETTINGS_MODULE = {settings}
python_files = test_*.py
addopts = -ra --strict-markers -p no:cacheprovider
timeout = 300
markers =
    browser: drives a real Chromium through Playwright
    slow: takes more than a few seconds
    private_redis: acts on the whole Redis server: gets a redis-server of its own
"""


def site_packages(venv: Path) -> Path:
    return Path(
        run(
            [
                venv / "bin" / "python",
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )


def run_suite(
    combination: Combination, venv: Path, workdir: Path, *, settings: str, tests: str, env: dict
) -> str:
    """Run pytest in ``workdir``; return its closing line. Raises MatrixError on failure."""
    (workdir / "pytest.ini").write_text(PYTEST_INI.format(settings=settings))
    installed = site_packages(venv)
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PYTHONPATH": str(workdir),
        "DJANGO_SETTINGS_MODULE": settings,
        "DATABASE_URL": f"postgres://hoa@127.0.0.1:{PG_PORT}/hoa",
        "LOCKING_EXPECT_INSTALLED_IN": str(installed),
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    # Before the run: the `locking` these tests import is the wheel's.
    where = run(
        [venv / "bin" / "python", "-c", "import locking; print(locking.__file__)"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(where).is_relative_to(installed):
        raise MatrixError(f"{combination.name}: locking imports from {where}, not {installed}")
    versions = run(
        [
            venv / "bin" / "python",
            "-c",
            "import sys, django, redis; print(sys.version.split()[0], django.get_version(), "
            "redis.__version__)",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    log(
        f"{combination.name}: Python {versions[0]}, Django {versions[1]}, redis-py "
        f"{versions[2]}; locking from {where}"
    )
    started = time.monotonic()
    result = run(
        [venv / "bin" / "python", "-m", "pytest", "-q", tests],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    closing = lines[-1].strip("= ") if lines else "(no output)"
    if result.returncode != 0:
        sys.stdout.write(result.stdout[-20000:])
        sys.stderr.write(result.stderr[-5000:])
        raise MatrixError(f"{combination.name} {tests}: {closing} (exit {result.returncode})")
    log(f"{combination.name} {tests}: {closing} (wall {elapsed:.0f} s)")
    for line in warnings_summary(lines):  # a passing run's warnings: an adopter sees them too
        log(f"{combination.name} {tests}: {line}")
    return f"{closing} (wall {elapsed:.0f} s)"


def warnings_summary(lines: list[str], limit: int = 20) -> list[str]:
    """The lines of pytest's "warnings summary" section, at most ``limit``."""
    found, inside = [], False
    for line in lines:
        if "warnings summary" in line:
            inside = True
        elif inside and (line.startswith("-- Docs:") or line.startswith("=")):
            break
        elif inside:
            found.append(line.strip())
    return found[:limit]


@contextmanager
def own_redis(directory: Path, timeout: float = 10) -> Iterator[str]:
    """A redis-server of the matrix's own on a free loopback port, without persistence, in
    ``directory``; yields its URL (no database), stops it by its pid after the block."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1",
         "--port", str(port), "--dir", str(directory), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while not _answers_ping(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise MatrixError(f"redis-server on port {port} did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False  # not listening yet


def run_combination(
    combination: Combination, wheel: Path, tests: Path, *, redis_url: str
) -> list[tuple[str, str]]:
    venv = prepare_venv(combination, wheel, tests)
    tag = combination.name.replace(".", "").replace("-", "_")
    results = []
    with tempfile.TemporaryDirectory(prefix=f"locking-matrix-{combination.name}-") as tmp:
        workdir = Path(tmp) / "tests"
        workdir.mkdir()
        copy_tests(tests, workdir / "locking_tests", ignore=("example_project",))
        closing = run_suite(
            combination,
            venv,
            workdir,
            settings="locking_tests.settings",
            tests="locking_tests",
            env={
                "TEST_DATABASE_NAME": f"test_locking_matrix_{tag}",
                "LOCK_REDIS_URL": f"{redis_url}/1",
                "REDIS_URL": f"{redis_url}/1",
            },
        )
        results.append((f"{combination.name} locking's tests", closing))
        if combination.example:
            example = Path(tmp) / "example"
            copy_tests(tests / "example_project", example)
            closing = run_suite(
                combination,
                venv,
                example,
                settings="invoicing.settings",
                tests="invoices",
                env={
                    "TEST_DATABASE_NAME": "test_locking_example",
                    "LOCK_REDIS_URL": f"{redis_url}/2",
                    "EXPECT_DJANGO": combination.requirements[0].split(">=")[1].split(",")[0],
                },
            )
            results.append((f"{combination.name} example project", closing))
    results.append(
        (f"{combination.name} quick start", quickstart(combination, wheel, redis_url, tag))
    )
    return results


def quickstart(combination: Combination, wheel: Path, redis_url: str, tag: str) -> str:
    """The quick start in a fresh project against the wheel; its timed steps logged."""
    database = f"locking_quickstart_{tag}"
    django = next(
        r for r in combination.requirements if r.lower().startswith(("django=", "django>"))
    )
    try:
        create_database(PG_PORT, database)
        try:
            timed = run_quickstart(
                python=interpreter(combination.python), wheel=wheel, django=django,
                pg_port=PG_PORT, redis_url=f"{redis_url}/{3 + COMBINATIONS.index(combination)}",
                database=database,
            )  # fmt: skip
        finally:
            create_database(PG_PORT, database, drop=True)
    except QuickstartError as error:
        raise MatrixError(f"{combination.name} {error}") from error
    lines = report(f"{combination.name} quick start", timed)
    for line in lines:
        log(line)
    return f"{len(timed)} commands exit 0, {sum(s for _, s in timed):.1f} s"


def pinned(requirements: Path, names: tuple[str, ...]) -> list[str]:
    """The ``name==version`` lines of ``requirements`` for ``names``; every one must be there."""
    found = {}
    for line in requirements.read_text().splitlines():
        name, equals, version = line.split("#")[0].strip().partition("==")
        if equals and name.split("[")[0].lower() in names:
            found[name.split("[")[0].lower()] = f"{name}=={version.strip()}"
    missing = sorted(set(names) - found.keys())
    if missing:
        raise MatrixError(f"typing: {requirements.name} pins no {', '.join(missing)}")
    return [found[name] for name in names]


def without_py_typed(wheel: Path, into: Path) -> Path:
    """A copy of ``wheel`` (same file name) without ``locking/py.typed`` or its RECORD line."""
    copy = into / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(copy, "w", zipfile.ZIP_DEFLATED) as out:
        for item in source.infolist():
            if item.filename == "locking/py.typed":
                continue
            data = source.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(x for x in lines if not x.startswith("locking/py.typed,")).encode()
            out.writestr(item, data)
    return copy


def typing_venv(name: str, wheel: Path) -> Path:
    """A virtualenv with ``wheel`` (no extras), Django and the type checker, for mypy to read
    the package as an adopter's does: installed, from site-packages. Reused if unchanged."""
    python = interpreter(TYPING_PYTHON)
    requirements = [
        pin for file, names in TYPING_REQUIREMENTS.items() for pin in pinned(ROOT / file, names)
    ]
    venv = MATRIX_DIR / name
    stamp_text = json.dumps([str(python), wheel_digest(wheel), requirements])
    stamp = venv / ".matrix-stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        log(f"{name}: reusing {venv.relative_to(ROOT)}")
        return venv
    log(f"{name}: creating {venv.relative_to(ROOT)} with {python}")
    shutil.rmtree(venv, ignore_errors=True)
    if run([python, "-m", "venv", venv]).returncode != 0:
        raise MatrixError(f"{name}: could not create a virtualenv with {python}")
    pip = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "-q", "install"]
    result = run([*pip, wheel.resolve(), *requirements], capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write((result.stdout + result.stderr)[-5000:])
        raise MatrixError(f"{name}: pip failed: {wheel.name} {' '.join(requirements)}")
    stamp.write_text(stamp_text)
    return venv


def mypy(venv: Path, consumer: Path) -> tuple[int, list[str]]:
    """Run mypy on ``consumer`` alone, in a directory of its own (no configuration file of
    the checkout's applies); return its exit status and its lines."""
    with tempfile.TemporaryDirectory(prefix="locking-typing-") as tmp:
        shutil.copy(consumer, Path(tmp) / consumer.name)
        result = run(
            [venv / "bin" / "python", *MYPY, consumer.name],
            cwd=tmp,
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")},
        )
    return result.returncode, (result.stdout + result.stderr).strip().splitlines()


def check_types(wheel: Path, tests: Path) -> list[tuple[str, str]]:
    """mypy on the consumer against the wheel (must pass) and against its copy without
    ``py.typed`` (the control: must fail, for that reason)."""
    consumer = tests / CONSUMER
    if not consumer.is_file():
        raise MatrixError(f"typing: the sdist carries no locking/tests/{CONSUMER}")
    command = f"mypy {' '.join(MYPY[2:4])}"
    status, lines = mypy(typing_venv("typing", wheel), consumer)
    if status != 0:
        print("\n".join(lines[-60:]))
        raise MatrixError(f"typing: {command} on {CONSUMER.name} failed: {lines[-1:]}")
    log(f"typing: {command} {CONSUMER.name}: {lines[-1]}")
    with tempfile.TemporaryDirectory(prefix="locking-typing-control-") as tmp:
        control = without_py_typed(wheel, Path(tmp))
        status, control_lines = mypy(typing_venv("typing-control", control), consumer)
    refusal = next((line for line in control_lines if NOT_TYPED in line), None)
    if status == 0:
        raise MatrixError("typing control: mypy passed without py.typed: the run cannot fail")
    if refusal is None:
        print("\n".join(control_lines[-20:]))
        raise MatrixError(f"typing control: mypy failed, but not for py.typed: {control_lines[:1]}")
    log(f"typing control (the wheel without py.typed): exit {status}: {refusal}")
    return [
        (f"typing: {command}", lines[-1]),
        ("typing control: the wheel without py.typed", f"exit {status} as it must: {refusal}"),
    ]


def main(argv: list[str]) -> int:
    wheels = [Path(name) for name in argv if name.endswith(".whl")]
    sdists = [Path(name) for name in argv if name.endswith(".tar.gz")]
    if len(argv) != 2 or len(wheels) != 1 or len(sdists) != 1:
        print(
            f"locking_matrix: give one wheel and one sdist, got: {' '.join(argv) or 'nothing'}",
            file=sys.stderr,
        )
        return 1
    (wheel,), (sdist,) = wheels, sdists
    for path in (wheel, sdist):
        if not path.is_file():
            print(f"locking_matrix: no such file: {path}", file=sys.stderr)
            return 1
    MATRIX_DIR.mkdir(parents=True, exist_ok=True)
    results, failures = [], []
    with (
        tempfile.TemporaryDirectory(prefix="locking-matrix-sdist-") as unpacked,
        ExitStack() as stack,
    ):
        try:
            tests = unpack_tests(sdist, Path(unpacked))
            redis_url = stack.enter_context(own_redis(Path(unpacked)))
        except MatrixError as error:
            print(f"locking_matrix: {error}", file=sys.stderr)
            return 1
        log(f"locking's tests from {sdist.name}, the package from {wheel.name}")
        log(f"Redis of the matrix's own: {redis_url}")
        for combination in COMBINATIONS:
            try:
                results += run_combination(combination, wheel, tests, redis_url=redis_url)
            except MatrixError as error:
                failures.append(str(error))
                results.append((combination.name, f"FAILED: {error}"))
        try:
            results += check_types(wheel, tests)
        except MatrixError as error:
            failures.append(str(error))
            results.append(("typing", f"FAILED: {error}"))
    print()
    for name, closing in results:
        print(f"  {name:<45} {closing}")
    for failure in failures:
        print(f"locking_matrix: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
