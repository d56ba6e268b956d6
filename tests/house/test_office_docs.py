"""The product's documentation site for office staff and operators (`make docs`, beside
locking's): docs/office/ includes the staff guide, operations, the scheduled jobs and the
design from docs/ and builds with every warning an error; a copy with a broken link fails."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ["staff-guide", "operations", "scheduling", "design"]


def make_docs(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "--no-print-directory", "docs-office",
         f"OFFICE_DOCS_SRC={source}", f"OFFICE_DOCS_OUT={out}"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def copy_of_the_docs(tmp_path: Path) -> Path:
    """docs/office/ and the pages it includes, as they sit in docs/."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "office", docs / "office", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(DOCS / "screenshots", docs / "screenshots")
    for page in PAGES:
        shutil.copy(DOCS / f"{page}.md", docs / f"{page}.md")
    return docs / "office"


@pytest.mark.slow
def test_the_staff_guide_and_operations_build_into_a_site_beside_lockings(tmp_path):
    result = make_docs(DOCS / "office", tmp_path / "office")
    assert (result.returncode, result.stderr) == (0, "")
    site = tmp_path / "office"
    assert {path.stem for path in site.glob("*.html")} - {"genindex", "search"} == {
        "index",
        *PAGES,
    }
    guide = (site / "staff-guide.html").read_text()
    assert "Staff guide: complaints" in guide and 'src="_images/complaint-timeline.png"' in guide
    assert (site / "_images" / "complaint-timeline.png").exists()
    operations = (site / "operations.html").read_text()
    assert 'href="staff-guide.html"' in operations  # between the pages of this site
    assert 'href="../locking/index.html"' in operations  # into locking's, built beside it


@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path):
    office = copy_of_the_docs(tmp_path)
    with (office.parent / "operations.md").open("a") as page:
        page.write("\nSee [the runbook](runbook).\n")
    result = make_docs(office, tmp_path / "site")
    assert result.returncode != 0
    assert "runbook" in result.stderr
