"""Check the wheel of django-fenced-writes: the locking app and nothing else, full metadata,
and a CHANGELOG in step with its version (``changelog_problems``).

    python scripts/check_wheel.py dist/django_fenced_writes-1.0.0-py3-none-any.whl

Prints the wheel's file list and exits 0, or prints one line per problem and exits 1.
`make dist` runs it after building; tests/test_dist.py runs it on a fresh build and on
wheels made wrong on purpose.
"""

import ast
import re
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

DIST_INFO = "django_fenced_writes-1.0.0.dist-info/"
# What the app needs at run time: its code, migrations, admin template, management command.
REQUIRED = (
    "locking/__init__.py",
    "locking/apps.py",
    "locking/checks.py",
    "locking/models.py",
    "locking/py.typed",
    "locking/migrations/__init__.py",
    "locking/migrations/0001_initial.py",
    "locking/management/commands/prune_fence_events.py",
    "locking/templates/admin/locking/fenceevent/break_lease.html",
    "locking/README.md",
    "locking/CHANGELOG.md",
    DIST_INFO + "METADATA",
    DIST_INFO + "licenses/LICENSE",
)
# Every runtime import of locking, with a range (a lower and an upper bound).
REQUIRED_DEPENDENCIES = ("django", "redis", "asgiref", "opentelemetry-api", "prometheus-client")
REQUIRED_CLASSIFIERS = (
    "Framework :: Django :: 5.2",
    "Framework :: Django :: 6.0",
    "Framework :: Django :: 6.1",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
)
# What the matrix does not run must not be claimed.
CLAIMED = re.compile(r"^(Framework :: Django :: |Programming Language :: Python :: 3\.)")


# Keep a Changelog 1.1.0 (https://keepachangelog.com/en/1.1.0/): an optional
# "## [Unreleased]" on top, then "## [1.2.3] - 2026-12-04" newest first, each with
# "### Added" / "Changed" / "Deprecated" / "Removed" / "Fixed" / "Security".
UNRELEASED = "## [Unreleased]"
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$")
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
NAME_IN_CODE = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Source:
    """What the files of one distribution say about themselves."""

    version: str | None  # locking.__version__
    exports: tuple[str, ...]  # locking.__all__


def read_source(init_text: str) -> Source:
    """``__version__`` and ``__all__`` of a ``locking/__init__.py``, read without importing."""
    version, exports = None, ()
    for node in ast.parse(init_text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == "__version__":
                version = ast.literal_eval(node.value)
            elif isinstance(target, ast.Name) and target.id == "__all__":
                exports = tuple(ast.literal_eval(node.value))
    return Source(version, exports)


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def changelog_problems(text: str, source: Source) -> list[str]:
    """Every way the CHANGELOG is not Keep a Changelog, or not in step with ``source``.

    In step: the newest released version is ``locking.__version__``, or the version is
    newer and an ``[Unreleased]`` section above it holds its entry; and while the version
    is a released one, no name that it exports (``__all__``) is listed as unreleased
    (the first name in code of an entry under ``[Unreleased]``, ``### Added``): what a
    built version exports was released with it.
    """
    found = []
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# Changelog"):
        found.append("CHANGELOG: the first line is not the '# Changelog' title")
    released: list[tuple[int, ...]] = []
    dates: list[str] = []
    unreleased_added: list[str] = []
    has_unreleased = False
    section, kind = None, None
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            kind = None
            if line == UNRELEASED:
                if released or has_unreleased:
                    found.append(f"CHANGELOG line {number}: [Unreleased] is not the first section")
                has_unreleased, section = True, "unreleased"
            elif match := RELEASE.match(line):
                version = tuple(int(part) for part in match.groups()[:3])
                if released and version >= released[-1]:
                    found.append(f"CHANGELOG line {number}: {line[3:]} is not below the one above")
                if dates and match.group(4) > dates[-1]:
                    found.append(f"CHANGELOG line {number}: {line[3:]} is dated after a newer one")
                released.append(version)
                dates.append(match.group(4))
                section = "released"
            else:
                found.append(
                    f"CHANGELOG line {number}: {line!r} is neither '## [Unreleased]' nor "
                    "'## [X.Y.Z] - YYYY-MM-DD'"
                )
        elif line.startswith("### "):
            kind = line[4:].strip()
            if kind not in KINDS:
                found.append(f"CHANGELOG line {number}: {kind!r} is not one of {', '.join(KINDS)}")
        elif section == "unreleased" and kind == "Added" and line.startswith("- "):
            # An entry names what it adds first: "- `insert_fenced(instance, token)`: …".
            unreleased_added += NAME_IN_CODE.findall(line)[:1]
    if source.version is None:
        return [*found, "locking/__init__.py sets no __version__"]
    if not released:
        return [*found, "CHANGELOG: no released version"]
    newest = ".".join(map(str, released[0]))
    current = version_tuple(source.version)
    if current < released[0]:
        found.append(
            f"CHANGELOG: locking.__version__ {source.version} is below its newest release {newest}"
        )
    elif current > released[0] and not has_unreleased:
        found.append(
            f"CHANGELOG: locking.__version__ {source.version} is not its newest release "
            f"{newest}, and no [Unreleased] section above it holds its entry"
        )
    if current in released:
        found += [
            f"CHANGELOG: `{name}` is listed as unreleased (Added), but {source.version} exports it"
            for name in dict.fromkeys(unreleased_added)
            if name in source.exports
        ]
    return found


def problems(wheel: Path) -> list[str]:
    """Every way ``wheel`` differs from what the distribution must be."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_text = (
            archive.read(DIST_INFO + "METADATA").decode() if DIST_INFO + "METADATA" in names else ""
        )
        changelog = archive.read("locking/CHANGELOG.md") if "locking/CHANGELOG.md" in names else b""
        init = archive.read("locking/__init__.py") if "locking/__init__.py" in names else b""
    found = []
    for name in names:
        if name.startswith(DIST_INFO):
            continue
        if not name.startswith("locking/"):
            found.append(f"not of the locking package: {name}")
        elif name.startswith("locking/tests/"):
            found.append(f"locking's tests stay in the checkout: {name}")
        elif "__pycache__" in name or name.endswith(".pyc"):
            found.append(f"compiled file: {name}")
    found += [f"missing: {name}" for name in REQUIRED if name not in names]
    if changelog and init:
        found += changelog_problems(changelog.decode(), read_source(init.decode()))
    if not metadata_text:
        return found
    metadata = Parser().parsestr(metadata_text)
    for field, expected in (
        ("Name", "django-fenced-writes"),
        ("Version", "1.0.0"),
        ("License-Expression", "MIT"),
        ("Requires-Python", ">=3.11"),
        ("Description-Content-Type", "text/markdown"),
    ):
        if metadata.get(field) != expected:
            found.append(f"metadata {field}: {metadata.get(field)!r}, expected {expected!r}")
    if "# django-fenced-writes" not in (metadata.get_payload() or ""):
        found.append("metadata: the description is not locking/README.md")
    classifiers = metadata.get_all("Classifier") or []
    found += [f"classifier missing: {c}" for c in REQUIRED_CLASSIFIERS if c not in classifiers]
    found += [
        f"classifier claims what the matrix does not run: {c}"
        for c in classifiers
        if CLAIMED.match(c) and c not in REQUIRED_CLASSIFIERS
    ]
    requirements = {}
    for line in metadata.get_all("Requires-Dist") or []:
        if "extra ==" in line:
            continue
        match = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*(.*)", line)
        requirements[match.group(1).lower().replace("_", "-")] = match.group(2)
    for name in REQUIRED_DEPENDENCIES:
        spec = requirements.get(name)
        if spec is None:
            found.append(f"runtime dependency not declared: {name}")
        elif not ("<" in spec and ">=" in spec):
            found.append(f"runtime dependency without a range: {name} {spec!r}")
    extra = [name for name in requirements if name not in REQUIRED_DEPENDENCIES]
    found += [f"runtime dependency that locking does not import: {name}" for name in extra]
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_wheel.py <wheel>", file=sys.stderr)
        return 2
    wheel = Path(argv[0])
    if not wheel.is_file():
        print(f"check_wheel: no such wheel: {wheel}", file=sys.stderr)
        return 1
    found = problems(wheel)
    if found:
        for problem in found:
            print(f"check_wheel: {wheel.name}: {problem}", file=sys.stderr)
        return 1
    with zipfile.ZipFile(wheel) as archive:
        entries = archive.infolist()
    for entry in entries:
        print(f"{entry.file_size:>9}  {entry.filename}")
    print(f"{wheel.name}: {len(entries)} files, the locking package only: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
