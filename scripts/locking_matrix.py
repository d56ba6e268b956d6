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

The test databases (test_locking_matrix_*, test_locking_example) and Redis databases 2 and
3 are the matrix's own, so a matrix run never meets `make test`'s (Redis database 1).
Exits 1 with one line per failed combination.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATRIX_DIR = ROOT / ".local" / "matrix"
PG_PORT = os.environ.get("HOA_PG_PORT", "55432")
REDIS_PORT = os.environ.get("HOA_REDIS_PORT", "56379")
# The lowest version of every declared dependency (pyproject.toml's lower bounds).
LOWEST = (
    "Django==5.2",
    "redis==6.0.0",
    "asgiref==3.8.1",
    "opentelemetry-api==1.27.0",
    "opentelemetry-sdk==1.27.0",
    "prometheus-client==0.20.0",
    "psycopg[binary]==3.2.1",
    "django-redis==5.4.0",
)


@dataclass(frozen=True)
class Combination:
    name: str
    python: str  # minor version: "3.11"
    requirements: tuple[str, ...]
    example: bool = False


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
    return f"{closing} (wall {elapsed:.0f} s)"


def run_combination(combination: Combination, wheel: Path, tests: Path) -> list[tuple[str, str]]:
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
                "LOCK_REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/2",
                "REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/2",
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
                    "LOCK_REDIS_URL": f"redis://127.0.0.1:{REDIS_PORT}/3",
                    "EXPECT_DJANGO": combination.requirements[0].split(">=")[1].split(",")[0],
                },
            )
            results.append((f"{combination.name} example project", closing))
    return results


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
    with tempfile.TemporaryDirectory(prefix="locking-matrix-sdist-") as unpacked:
        try:
            tests = unpack_tests(sdist, Path(unpacked))
        except MatrixError as error:
            print(f"locking_matrix: {error}", file=sys.stderr)
            return 1
        log(f"locking's tests from {sdist.name}, the package from {wheel.name}")
        for combination in COMBINATIONS:
            try:
                results += run_combination(combination, wheel, tests)
            except MatrixError as error:
                failures.append(str(error))
                results.append((combination.name, f"FAILED: {error}"))
    print()
    for name, closing in results:
        print(f"  {name:<45} {closing}")
    for failure in failures:
        print(f"locking_matrix: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
