"""The wheel of django-fenced-writes (`pip wheel --no-deps .`): locking alone, full metadata.

Builds the wheel from the checkout as `make dist` does (PEP 517, the pinned setuptools) and
runs scripts/check_wheel.py on it; the controls make wheels wrong on purpose, so the check
is seen to refuse what it is for.
"""

import runpy
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import locking

ROOT = Path(__file__).resolve().parent.parent
CHECK = runpy.run_path(str(ROOT / "scripts" / "check_wheel.py"))
DIST_INFO = CHECK["DIST_INFO"]

# One worker runs the module, so the wheel is built once per run: setuptools builds in the
# checkout (build/, *.egg-info), and two workers building at once trip over each other's
# files (CI failed so once: "pip wheel ... returned non-zero exit status 1").
pytestmark = pytest.mark.xdist_group("dist")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        check=False,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, f"pip wheel failed:\n{build.stdout}\n{build.stderr}"
    (built,) = out.glob("*.whl")
    return built


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


@pytest.mark.slow
def test_the_wheel_holds_the_locking_package_only_with_complete_metadata(wheel):
    version = locking.__version__  # the one source: pyproject.toml reads it
    assert wheel.name == f"django_fenced_writes-{version}-py3-none-any.whl"
    assert CHECK["problems"](wheel) == []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"django_fenced_writes-{version}.dist-info/METADATA").decode()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"locking", f"django_fenced_writes-{version}.dist-info"}
    assert f"\nVersion: {version}\n" in metadata
    assert "locking/migrations/0006_receiver.py" in names
    assert "locking/py.typed" in names  # PEP 561: type checkers read locking's annotations
    assert not [name for name in names if name.startswith("locking/tests")]


@pytest.mark.slow
def test_the_check_refuses_a_wheel_with_the_platform_or_locking_tests(wheel, tmp_path):
    bad = copy_with(
        wheel, tmp_path / "bad.whl", add=("hoa/__init__.py", "locking/tests/__init__.py")
    )
    assert CHECK["problems"](bad) == [
        "not of the locking package: hoa/__init__.py",
        "locking's tests stay in the checkout: locking/tests/__init__.py",
    ]


@pytest.mark.slow
def test_the_check_refuses_a_wheel_without_migrations_template_or_py_typed(wheel, tmp_path):
    bad = copy_with(
        wheel,
        tmp_path / "bad.whl",
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
def test_the_check_refuses_an_undeclared_or_unbounded_dependency_and_a_wrong_claim(wheel, tmp_path):
    def worse(text: str) -> str:
        text = text.replace("Requires-Dist: asgiref<4,>=3.8.1\n", "")
        text = text.replace("Requires-Dist: redis<9,>=6.0\n", "Requires-Dist: redis\n")
        return text.replace(
            "Classifier: Framework :: Django :: 6.1\n",
            "Classifier: Framework :: Django :: 6.1\nClassifier: Framework :: Django :: 4.2\n",
        )

    bad = copy_with(wheel, tmp_path / "bad.whl", metadata=worse)
    assert CHECK["problems"](bad) == [
        "classifier claims what the matrix does not run: Framework :: Django :: 4.2",
        "runtime dependency without a range: redis ''",
        "runtime dependency not declared: asgiref",
    ]


def test_check_wheel_command_answers_a_missing_wheel_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_wheel.py"), str(tmp_path / "none.whl")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == f"check_wheel: no such wheel: {tmp_path / 'none.whl'}\n"


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
    bad = copy_with(
        wheel,
        tmp_path / "bad.whl",
        edit={"locking/CHANGELOG.md": lambda text: EXPORTS_AS_UNRELEASED},
    )
    version = locking.__version__
    assert CHECK["problems"](bad) == [
        f"CHANGELOG: `insert_fenced` is listed as unreleased (Added), but {version} exports it",
        f"CHANGELOG: `LeasedAttempt` is listed as unreleased (Added), but {version} exports it",
    ]
