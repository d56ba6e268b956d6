"""The distribution files of django-fenced-writes (`make dist`): the sdist carries locking
with its tests and docs, the wheel locking alone; both with full metadata and a CHANGELOG
in step with ``locking.__version__``.

Builds both from the checkout as `make dist` does (`python -m build`: the sdist, then the
wheel from that sdist, with the pinned setuptools) and runs scripts/check_wheel.py and
`twine check --strict` on them; the controls make files wrong on purpose, so each check is
seen to refuse what it is for.
"""

import ast
import io
import runpy
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import locking

ROOT = Path(__file__).resolve().parents[2]
CHECK = runpy.run_path(str(ROOT / "scripts" / "check_wheel.py"))
VERSION = locking.__version__  # the one source: pyproject.toml reads it
DIST_INFO = f"django_fenced_writes-{VERSION}.dist-info/"

# One worker runs the module, so the files are built once per run: setuptools writes in the
# checkout (*.egg-info), and two workers building at once trip over each other's files (CI
# failed so once: "pip wheel ... returned non-zero exit status 1").
pytestmark = pytest.mark.xdist_group("dist")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """``(wheel, sdist)`` built as `make dist` builds them."""
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=False,
        timeout=600,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"python -m build failed:\n{build.stdout}\n{build.stderr}"
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[0]


@pytest.fixture(scope="module")
def sdist(built) -> Path:
    return built[1]


def copy_with(wheel: Path, target: Path, *, drop=(), add=(), metadata=None, edit=None) -> Path:
    """A copy of ``wheel`` without ``drop``, with empty files ``add``, its METADATA passed
    through ``metadata`` and any file named in ``edit`` ({name: text -> text}) through its
    function."""
    edit = dict(edit or {})
    if metadata is not None:
        edit[DIST_INFO + "METADATA"] = metadata
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as copy:
        for item in source.infolist():
            if item.filename in drop:
                continue
            data = source.read(item)
            if item.filename in edit:
                data = edit[item.filename](data.decode()).encode()
            copy.writestr(item, data)
        for name in add:
            copy.writestr(name, "")
    return target


def sdist_copy_with(sdist: Path, target_dir: Path, *, drop=(), add=()) -> Path:
    """A copy of ``sdist`` (same file name, in ``target_dir``) without the files ``drop`` and
    with empty files ``add``, both named below its top directory."""
    top = f"django_fenced_writes-{VERSION}/"
    target = target_dir / sdist.name
    with tarfile.open(sdist) as source, tarfile.open(target, "w:gz") as copy:
        for member in source.getmembers():
            if member.name.removeprefix(top) in drop:
                continue
            copy.addfile(member, source.extractfile(member) if member.isfile() else None)
        for name in add:
            copy.addfile(tarfile.TarInfo(top + name), io.BytesIO(b""))
    return target


@pytest.mark.slow
def test_the_wheel_holds_the_locking_package_only_with_complete_metadata(wheel):
    assert wheel.name == f"django_fenced_writes-{VERSION}-py3-none-any.whl"
    assert CHECK["problems"](wheel) == []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(DIST_INFO + "METADATA").decode()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"locking", DIST_INFO.rstrip("/")}
    assert f"\nVersion: {VERSION}\n" in metadata
    assert "locking/migrations/0006_receiver.py" in names
    assert "locking/py.typed" in names  # PEP 561: type checkers read locking's annotations
    assert not [name for name in names if name.startswith("locking/tests")]


@pytest.mark.slow
def test_the_sdist_holds_locking_with_its_tests_and_docs_and_nothing_of_the_platform(sdist, wheel):
    assert sdist.name == f"django_fenced_writes-{VERSION}.tar.gz"
    assert CHECK["sdist_problems"](sdist) == []
    assert CHECK["pair_problems"](wheel, sdist) == []
    top, files = CHECK["sdist_files"](sdist)
    assert top == f"django_fenced_writes-{VERSION}"
    for name in (
        "PKG-INFO",
        "pyproject.toml",
        "LICENSE",
        "docs/locking/index.md",
        "docs/locking/fence.md",
        "locking/py.typed",
        "locking/tests/test_fence.py",
        "locking/tests/requirements.txt",
        "locking/tests/testapp/migrations/0001_initial.py",
        "locking/tests/example_project/invoicing/settings.py",
    ):
        assert name in files, name
    assert {name.split("/")[0] for name in files} == {
        "PKG-INFO",
        "pyproject.toml",
        "setup.cfg",
        "LICENSE",
        "MANIFEST.in",
        "django_fenced_writes.egg-info",
        "docs",
        "locking",
    }
    docs = sorted(name for name in files if name.startswith("docs/"))
    assert docs == CHECK["checkout_files"]("docs/locking/")
    assert "docs/locking/index.md" in docs


@pytest.mark.slow
def test_the_sdist_check_refuses_the_platform_and_a_missing_test_or_page(sdist, tmp_path):
    bad = sdist_copy_with(
        sdist,
        tmp_path,
        drop=("locking/tests/test_fence.py", "docs/locking/fence.md"),
        add=(
            "hoa/__init__.py",
            "tests/house/test_foundation.py",
            "README.md",
            "docs/operations.md",
        ),
    )
    assert CHECK["sdist_problems"](bad) == [
        "not of the locking package, its tests or its docs: hoa/__init__.py",
        "not of the locking package, its tests or its docs: tests/house/test_foundation.py",
        "not of the locking package, its tests or its docs: README.md",
        "not of the locking package, its tests or its docs: docs/operations.md",
        "missing: locking/tests/test_fence.py",
        "missing: docs/locking/fence.md",
    ]


@pytest.mark.slow
def test_the_pair_check_refuses_a_wheel_with_a_file_its_sdist_lacks(wheel, sdist, tmp_path):
    bad = sdist_copy_with(sdist, tmp_path, drop=("locking/py.typed",))
    assert CHECK["pair_problems"](wheel, bad) == [
        "the wheel's locking/py.typed is not in the sdist"
    ]


@pytest.mark.slow
def test_twine_check_strict_passes_both_files_and_refuses_a_wheel_without_description(
    wheel, sdist, tmp_path
):
    def twine_check(*paths: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "twine", "--no-color", "check", "--strict", *map(str, paths)],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    passed = twine_check(wheel, sdist)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.count("PASSED") == 2

    def without_description(text: str) -> str:
        return text.split("\n\n", 1)[0] + "\n"

    bad = copy_with(wheel, tmp_path / wheel.name, metadata=without_description)
    refused = twine_check(bad)
    assert refused.returncode == 1
    assert "FAILED" in refused.stdout
    assert "`long_description` missing" in refused.stdout


@pytest.mark.slow
def test_the_check_refuses_a_wheel_with_the_platform_or_locking_tests(wheel, tmp_path):
    bad = copy_with(
        wheel, tmp_path / wheel.name, add=("hoa/__init__.py", "locking/tests/__init__.py")
    )
    renamed = copy_with(wheel, tmp_path / "renamed.whl")
    assert CHECK["problems"](renamed) == [
        f"file name is not that of version {VERSION}: renamed.whl"
    ]
    assert CHECK["problems"](bad) == [
        "not of the locking package: hoa/__init__.py",
        "locking's tests are the sdist's, not the wheel's: locking/tests/__init__.py",
    ]


@pytest.mark.slow
def test_the_check_refuses_a_wheel_without_migrations_template_or_py_typed(wheel, tmp_path):
    bad = copy_with(
        wheel,
        tmp_path / wheel.name,
        drop=(
            "locking/migrations/0001_initial.py",
            "locking/templates/admin/locking/fenceevent/break_lease.html",
            "locking/py.typed",
        ),
    )
    assert CHECK["problems"](bad) == [
        "missing: locking/py.typed",
        "missing: locking/migrations/0001_initial.py",
        "missing: locking/templates/admin/locking/fenceevent/break_lease.html",
    ]


@pytest.mark.slow
def test_the_check_refuses_a_wheel_whose_pytest_plugin_is_missing_or_named_otherwise(
    wheel, tmp_path
):
    """The entry point is named by its module: under another name, a checkout that loads
    the module by its name (pytest_plugins) and the installed wheel register one module
    twice, and pytest stops ("Plugin already registered under a different name")."""
    points = DIST_INFO + "entry_points.txt"
    assert CHECK["entry_point_problems"](zipfile.ZipFile(wheel).read(points).decode()) == []
    (tmp_path / "renamed").mkdir()
    renamed = copy_with(
        wheel,
        tmp_path / "renamed" / wheel.name,
        edit={points: lambda text: text.replace("locking.pytest_plugin =", "fenced_writes =")},
    )
    missing = copy_with(wheel, tmp_path / wheel.name, drop=(points, "locking/pytest_plugin.py"))

    assert CHECK["problems"](renamed) == [
        "[pytest11] is not locking.pytest_plugin = locking.pytest_plugin: "
        "{'fenced_writes': 'locking.pytest_plugin'}"
    ]
    assert CHECK["problems"](missing) == [
        "missing: locking/pytest_plugin.py",
        "entry_points.txt has no [pytest11] entry point (the pytest plugin)",
    ]


@pytest.mark.slow
def test_the_check_refuses_an_undeclared_or_unbounded_dependency_and_a_wrong_claim(wheel, tmp_path):
    def worse(text: str) -> str:
        text = text.replace("Requires-Dist: asgiref<4,>=3.8.1\n", "")
        text = text.replace("Requires-Dist: redis<9,>=6.0\n", "Requires-Dist: redis\n")
        return text.replace(
            "Classifier: Framework :: Django :: 6.1\n",
            "Classifier: Framework :: Django :: 6.1\nClassifier: Framework :: Django :: 4.2\n",
        )

    bad = copy_with(wheel, tmp_path / wheel.name, metadata=worse)
    assert CHECK["problems"](bad) == [
        "classifier claims what the matrix does not run: Framework :: Django :: 4.2",
        "runtime dependency without a range: redis ''",
        "runtime dependency not declared: asgiref",
    ]


@pytest.mark.slow
def test_the_check_refuses_a_wheel_without_its_project_urls(wheel, tmp_path):
    def worse(text: str) -> str:
        lines = text.split("\n")
        source = next(line for line in lines if line.startswith("Project-URL: Source, "))
        kept = [line for line in lines if not line.startswith("Project-URL: Issues, ")]
        return "\n".join(kept).replace(source, source.replace("https://", "http://"))

    bad = copy_with(wheel, tmp_path / wheel.name, metadata=worse)
    assert CHECK["problems"](bad) == [
        "project URL missing: Source",
        "project URL missing: Issues",
    ]


def check_wheel_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_wheel.py"), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_wheel_command_answers_a_missing_file_in_one_line(tmp_path):
    result = check_wheel_command(str(tmp_path / "none.whl"))
    assert (result.returncode, result.stderr) == (
        1,
        f"check_wheel: no such wheel: {tmp_path / 'none.whl'}\n",
    )
    result = check_wheel_command(str(tmp_path / "none.tar.gz"))
    assert (result.returncode, result.stderr) == (
        1,
        f"check_wheel: no such sdist: {tmp_path / 'none.tar.gz'}\n",
    )


@pytest.mark.slow
def test_check_wheel_command_lists_both_files_and_says_ok(wheel, sdist):
    result = check_wheel_command(str(wheel), str(sdist))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith(f"{sdist.name}: ")
    assert lines[-1].endswith(" files, locking with its tests and its docs (docs/locking/): OK")
    assert f"{wheel.name}: " in result.stdout
    assert " files, the locking package only: OK" in result.stdout


# --- the CHANGELOG in step with the version (scripts/check_wheel.py, changelog_problems) ---

CHANGELOG = (ROOT / "locking" / "CHANGELOG.md").read_text()
SOURCE = CHECK["read_source"]((ROOT / "locking" / "__init__.py").read_text())
changelog_problems = CHECK["changelog_problems"]
Source = CHECK["Source"]

# The shape of the CHANGELOG that the 1.0.0 wheel shipped (issue 36): two names that wheel
# exported, listed as unreleased.
EXPORTS_AS_UNRELEASED = """# Changelog

## [Unreleased]

### Added

- `insert_fenced(instance, token)`: a new row that carries the fence.
- `LeasedAttempt`: `run_fenced` in two halves.

## [1.0.0] - 2026-12-04

### Added

- `FenceLock`, `advance_fence`, `run_fenced`.
"""


def test_the_changelog_is_keep_a_changelog_and_in_step_with_locking_version():
    assert (SOURCE.version, SOURCE.exports) == (locking.__version__, tuple(locking.__all__))
    assert changelog_problems(CHANGELOG, SOURCE) == []
    assert "\n## [Unreleased]\n" in CHANGELOG  # the next version's entry goes there
    released = CHANGELOG.split(f"\n## [{locking.__version__}] - ", 1)[1]
    for name in ("insert_fenced", "LeasedAttempt"):  # exported by the 1.0.0 wheel
        assert f"`{name}" in released


def test_the_check_refuses_a_released_version_s_exports_listed_as_unreleased():
    assert changelog_problems(EXPORTS_AS_UNRELEASED, Source("1.0.0", SOURCE.exports)) == [
        "CHANGELOG: `insert_fenced` is listed as unreleased (Added), but 1.0.0 exports it",
        "CHANGELOG: `LeasedAttempt` is listed as unreleased (Added), but 1.0.0 exports it",
    ]
    # The same text is right for code already numbered as the coming version.
    assert changelog_problems(EXPORTS_AS_UNRELEASED, Source("1.1.0", SOURCE.exports)) == []


def test_the_check_wants_the_newest_release_or_an_unreleased_entry_above_it():
    released_only = EXPORTS_AS_UNRELEASED.split("## [1.0.0]")[1]
    released_only = "# Changelog\n\n## [1.0.0]" + released_only
    assert changelog_problems(released_only, Source("1.0.0", SOURCE.exports)) == []
    assert changelog_problems(released_only, Source("2.0.0", SOURCE.exports)) == [
        "CHANGELOG: locking.__version__ 2.0.0 is not its newest release 1.0.0, and no "
        "[Unreleased] section above it holds its entry"
    ]
    assert changelog_problems(released_only, Source("0.9.0", SOURCE.exports)) == [
        "CHANGELOG: locking.__version__ 0.9.0 is below its newest release 1.0.0"
    ]


def test_the_check_refuses_what_keep_a_changelog_does_not_write():
    text = """# Changelog of django-fenced-writes

## Unreleased (1.1.0)

## [1.0.0] - 2026-12-04

### New

## [1.1.0] - 2026-11-01
"""
    assert changelog_problems(text, Source("1.0.0", ())) == [
        "CHANGELOG line 3: '## Unreleased (1.1.0)' is neither '## [Unreleased]' nor "
        "'## [X.Y.Z] - YYYY-MM-DD'",
        "CHANGELOG line 7: 'New' is not one of Added, Changed, Deprecated, Removed, Fixed, "
        "Security",
        "CHANGELOG line 9: [1.1.0] - 2026-11-01 is not below the one above",
    ]


@pytest.mark.slow
def test_the_wheel_check_refuses_a_wheel_whose_changelog_lists_its_exports_as_unreleased(
    wheel, tmp_path
):
    version = locking.__version__
    # The 1.0.0 wheel's mistake, as the wheel being checked would make it: its own version
    # released, two names it exports listed as unreleased above it.
    as_released = EXPORTS_AS_UNRELEASED.replace("## [1.0.0]", f"## [{version}]")
    bad = copy_with(
        wheel,
        tmp_path / wheel.name,
        edit={"locking/CHANGELOG.md": lambda text: as_released},
    )
    assert CHECK["problems"](bad) == [
        f"CHANGELOG: `insert_fenced` is listed as unreleased (Added), but {version} exports it",
        f"CHANGELOG: `LeasedAttempt` is listed as unreleased (Added), but {version} exports it",
    ]


def test_make_dist_builds_in_an_environment_of_its_own_with_build_and_twine_pinned():
    """Issue 45, item 6: `make dist` bootstrapped the whole development venv (533 MB:
    Django, Playwright, the test tools) to build a wheel of a few hundred KB, 84 s on a
    fresh checkout. It needs build and twine (check_wheel.py: the standard library only),
    installed alone into .local/build-venv from requirements-build.txt."""
    makefile = (ROOT / "Makefile").read_text()
    [prerequisites] = [
        line.split(":", 1)[1].split("##")[0].split()
        for line in makefile.splitlines()
        if line.startswith("dist:")
    ]
    assert prerequisites == ["$(BUILD_STAMP)"]
    recipe = makefile.split("\ndist:", 1)[1].split("\n\n", 1)[0]
    assert "$(PY)" not in recipe and recipe.count("$(BUILD_VENV)/bin/python") == 3
    assert "BUILD_VENV := .local/build-venv" in makefile
    assert "$(BUILD_STAMP): requirements-build.txt" in makefile
    pins = [
        line.strip()
        for line in (ROOT / "requirements-build.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert sorted(pin.split("==")[0] for pin in pins) == ["build", "twine"]
    assert all("==" in pin for pin in pins)
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(ast.parse((ROOT / "scripts" / "check_wheel.py").read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert sorted(imported - sys.stdlib_module_names) == []  # runs in the build venv
    # The development venv keeps the same versions (tests/ops/test_dist.py builds with them).
    assert "-r requirements-build.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
