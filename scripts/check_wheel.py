"""Check the distribution files of django-fenced-writes before anyone installs or uploads them.

    python scripts/check_wheel.py dist/django_fenced_writes-3.0.0-py3-none-any.whl \
        dist/django_fenced_writes-3.0.0.tar.gz

- the wheel holds the locking package and nothing else (no tests, nothing of the platform),
  with what the app needs at run time (migrations, template, checks, command, py.typed);
- the sdist holds the package, its tests (locking/tests) and its documentation
  (docs/locking/, the sources of its site), each as in the checkout, and nothing else of the
  platform;
- both carry full metadata, the version of their own ``locking.__version__``, and a
  CHANGELOG in step with that version (``changelog_problems``).

Prints each file list and exits 0, or prints one line per problem and exits 1.
`make dist` runs it after `twine check --strict`; tests/ops/test_dist.py runs it on a fresh
build and on files made wrong on purpose.
"""

import ast
import configparser
import re
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "django-fenced-writes"
PROJECT = "django_fenced_writes"  # the name in file names
# What the app needs at run time: its code, migrations, admin templates, management commands.
REQUIRED = (
    "locking/__init__.py",
    "locking/apps.py",
    "locking/checks.py",
    "locking/models.py",
    "locking/py.typed",
    "locking/migrations/__init__.py",
    "locking/migrations/0001_initial.py",
    "locking/management/commands/prune_fence_events.py",
    "locking/management/commands/locks.py",
    "locking/templates/admin/locking/fenceevent/break_lease.html",
    "locking/templates/admin/locking/fenceevent/break.html",
    "locking/templates/admin/locking/fenceevent/change_list.html",
    "locking/templates/admin/locking/fenceevent/holders.html",
    "locking/README.md",
    "locking/CHANGELOG.md",
    "locking/pytest_plugin.py",
    "locking/testing.py",
)
# The pytest plugin's entry point (entry_points.txt): named by its module, so that a checkout
# naming the module (pytest_plugins, -p) and the installed wheel load it once, not twice.
PYTEST_PLUGIN = "locking.pytest_plugin"
# What the sdist carries besides the package, each directory with every file it has in the
# checkout (MANIFEST.in grafts the same two): locking's tests and its documentation, the
# Markdown pages and the Sphinx configuration that builds them into its site (`make docs`).
TESTS = "locking/tests/"
DOCS = "docs/locking/"
# Files of the sdist's top directory that the build itself writes.
SDIST_TOP = ("PKG-INFO", "pyproject.toml", "setup.cfg", "LICENSE", "MANIFEST.in")
# Every runtime import of locking, with a range (a lower and an upper bound).
REQUIRED_DEPENDENCIES = (
    "django",
    "redis",
    "asgiref",
    "opentelemetry-api",
    "prometheus-client",
    "urllib3",
)
REQUIRED_CLASSIFIERS = (
    "Framework :: Django :: 5.2",
    "Framework :: Django :: 6.0",
    "Framework :: Django :: 6.1",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
)
# The project's URLs ([project.urls]): where an adopter reads the documentation and the
# changelog, finds the source and reports a bug (locking's tests check what they say).
PROJECT_URLS = ("Documentation", "Changelog", "Source", "Issues")
# What the matrix does not run must not be claimed.
CLAIMED = re.compile(r"^(Framework :: Django :: |Programming Language :: Python :: 3\.)")
COMPILED = re.compile(r"(^|/)__pycache__/|\.py[cod]$")

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


def metadata_problems(metadata_text: str, version: str | None) -> list[str]:
    """Every way the core metadata (a wheel's METADATA, an sdist's PKG-INFO) is incomplete."""
    found = []
    metadata = Parser().parsestr(metadata_text)
    for field, expected in (
        ("Name", NAME),
        ("Version", version),
        ("License-Expression", "MIT"),
        ("Requires-Python", ">=3.11"),
        ("Description-Content-Type", "text/markdown"),
    ):
        if metadata.get(field) != expected:
            found.append(f"metadata {field}: {metadata.get(field)!r}, expected {expected!r}")
    if "# django-fenced-writes" not in (metadata.get_payload() or ""):
        found.append("metadata: the description is not locking/README.md")
    urls = dict(
        (part.strip() for part in value.split(",", 1))
        for value in metadata.get_all("Project-URL") or []
        if "," in value
    )
    found += [
        f"project URL missing: {label}"
        for label in PROJECT_URLS
        if not urls.get(label, "").startswith("https://")
    ]
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


def source_problems(files: dict[str, bytes], metadata_name: str) -> list[str]:
    """The CHANGELOG of a distribution's ``locking`` against its version and exports, and
    its metadata."""
    init = files.get("locking/__init__.py")
    source = read_source(init.decode()) if init is not None else Source(None, ())
    found = []
    if "locking/CHANGELOG.md" in files:
        found += changelog_problems(files["locking/CHANGELOG.md"].decode(), source)
    if metadata_name in files:
        found += metadata_problems(files[metadata_name].decode(), source.version)
    return found


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def problems(wheel: Path) -> list[str]:
    """Every way ``wheel`` differs from what the distribution must be."""
    files = wheel_files(wheel)
    init = files.get("locking/__init__.py")
    version = read_source(init.decode()).version if init is not None else None
    dist_info = f"{PROJECT}-{version}.dist-info/"
    found = []
    if wheel.name != f"{PROJECT}-{version}-py3-none-any.whl":
        found.append(f"file name is not that of version {version}: {wheel.name}")
    for name in files:
        if name.startswith(dist_info):
            continue
        if not name.startswith("locking/"):
            found.append(f"not of the locking package: {name}")
        elif name.startswith(TESTS):
            found.append(f"locking's tests are the sdist's, not the wheel's: {name}")
        elif COMPILED.search(name):
            found.append(f"compiled file: {name}")
    required = (*REQUIRED, dist_info + "METADATA", dist_info + "licenses/LICENSE")
    found += [f"missing: {name}" for name in required if name not in files]
    found += entry_point_problems(files.get(dist_info + "entry_points.txt", b"").decode())
    return found + source_problems(files, dist_info + "METADATA")


def entry_point_problems(text: str) -> list[str]:
    """Every way the wheel's entry_points.txt does not register the pytest plugin as
    ``locking.pytest_plugin = locking.pytest_plugin`` in the ``pytest11`` group."""
    points = configparser.ConfigParser(delimiters=("=",))
    points.optionxform = str  # names keep their case
    try:
        points.read_string(text)
    except configparser.Error as error:
        return [f"entry_points.txt does not parse: {error}"]
    if not points.has_section("pytest11"):
        return ["entry_points.txt has no [pytest11] entry point (the pytest plugin)"]
    plugins = dict(points.items("pytest11"))
    if plugins != {PYTEST_PLUGIN: PYTEST_PLUGIN}:
        return [f"[pytest11] is not {PYTEST_PLUGIN} = {PYTEST_PLUGIN}: {plugins}"]
    return []


def sdist_files(sdist: Path) -> tuple[str, dict[str, bytes]]:
    """The sdist's top directory and its files (paths below that directory)."""
    with tarfile.open(sdist) as archive:
        members = [member for member in archive.getmembers() if member.isfile()]
        top = members[0].name.split("/")[0] if members else ""
        files = {}
        for member in members:
            head, _, path = member.name.partition("/")
            files[path if head == top else member.name] = archive.extractfile(member).read()
    return top, files


def checkout_files(directory: str, root: Path = ROOT) -> list[str]:
    """Every file of ``directory`` (TESTS, DOCS) in the checkout, as the sdist names it."""
    return sorted(
        path.relative_to(root).as_posix()
        for path in (root / directory).rglob("*")
        if path.is_file()
        and not COMPILED.search(path.relative_to(root).as_posix())
        and ".pytest_cache" not in path.parts
    )


def sdist_problems(sdist: Path, *, root: Path = ROOT) -> list[str]:
    """Every way ``sdist`` differs from what the source distribution must be."""
    top, files = sdist_files(sdist)
    init = files.get("locking/__init__.py")
    version = read_source(init.decode()).version if init is not None else None
    found = []
    if sdist.name != f"{PROJECT}-{version}.tar.gz" or top != f"{PROJECT}-{version}":
        found.append(f"file or directory name is not that of version {version}: {sdist.name}")
    for name in files:
        if name in SDIST_TOP or name.startswith((DOCS, f"{PROJECT}.egg-info/")):
            continue
        if not name.startswith("locking/"):
            found.append(f"not of the locking package, its tests or its docs: {name}")
        elif COMPILED.search(name):
            found.append(f"compiled file: {name}")
    required = (
        *REQUIRED,
        *checkout_files(TESTS, root),
        *checkout_files(DOCS, root),
        "PKG-INFO",
        "pyproject.toml",
    )
    found += [f"missing: {name}" for name in required if name not in files]
    return found + source_problems(files, "PKG-INFO")


def pair_problems(wheel: Path, sdist: Path) -> list[str]:
    """The wheel is built from the sdist: every file of its package is in the sdist."""
    _, sources = sdist_files(sdist)
    return [
        f"the wheel's {name} is not in the sdist"
        for name in wheel_files(wheel)
        if name.startswith("locking/") and name not in sources
    ]


def listing(path: Path) -> tuple[list[tuple[int, str]], str]:
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            entries = [(entry.file_size, entry.filename) for entry in archive.infolist()]
        return entries, "the locking package only"
    with tarfile.open(path) as archive:
        entries = [(m.size, m.name) for m in archive.getmembers() if m.isfile()]
    return entries, f"locking with its tests and its docs ({DOCS})"


def main(argv: list[str]) -> int:
    if not argv or not all(name.endswith((".whl", ".tar.gz")) for name in argv):
        print("usage: check_wheel.py <wheel> [<sdist>]  (.whl, .tar.gz)", file=sys.stderr)
        return 2
    paths = [Path(name) for name in argv]
    missing = [path for path in paths if not path.is_file()]
    if missing:
        kind = "wheel" if missing[0].name.endswith(".whl") else "sdist"
        print(f"check_wheel: no such {kind}: {missing[0]}", file=sys.stderr)
        return 1
    found = []
    for path in paths:
        check = problems if path.name.endswith(".whl") else sdist_problems
        found += [f"{path.name}: {problem}" for problem in check(path)]
    wheels = [path for path in paths if path.name.endswith(".whl")]
    sdists = [path for path in paths if path.name.endswith(".tar.gz")]
    if len(wheels) == 1 and len(sdists) == 1:
        found += [f"{sdists[0].name}: {problem}" for problem in pair_problems(*wheels, *sdists)]
    if found:
        for problem in found:
            print(f"check_wheel: {problem}", file=sys.stderr)
        return 1
    for path in paths:
        entries, what = listing(path)
        for size, name in entries:
            print(f"{size:>9}  {name}")
        print(f"{path.name}: {len(entries)} files, {what}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
