"""Check the wheel of django-fenced-writes: the locking app and nothing else, full metadata.

    python scripts/check_wheel.py dist/django_fenced_writes-1.0.0-py3-none-any.whl

Prints the wheel's file list and exits 0, or prints one line per problem and exits 1.
`make dist` runs it after building; tests/test_dist.py runs it on a fresh build and on
wheels made wrong on purpose.
"""

import re
import sys
import zipfile
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


def problems(wheel: Path) -> list[str]:
    """Every way ``wheel`` differs from what the distribution must be."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_text = (
            archive.read(DIST_INFO + "METADATA").decode() if DIST_INFO + "METADATA" in names else ""
        )
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
