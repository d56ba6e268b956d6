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


def copy_with(wheel: Path, target: Path, *, drop=(), add=(), metadata=None) -> Path:
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as copy:
        for item in source.infolist():
            if item.filename in drop:
                continue
            data = source.read(item)
            if metadata is not None and item.filename == DIST_INFO + "METADATA":
                data = metadata(data.decode()).encode()
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
