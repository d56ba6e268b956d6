"""Links from the product's pages into locking's documentation site.

The product's pages (``docs/*.md``) link locking's by their path in the repository
(``locking/index.md``), which the forge follows. Here that is another Sphinx project, built
by the same ``make docs`` beside this one (``docs/_build/locking/`` next to
``docs/_build/office/``): such a link becomes one to that site's page. Any other link to a
page this site does not have is still a warning, and ``-W`` makes it an error.
"""

from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms.post_transforms import SphinxPostTransform

# The directory of locking's pages in the repository, and where its site is built beside this.
LOCKING_PAGES = "locking/"
LOCKING_SITE = "../locking/"


class LinksToLockingsSite(SphinxPostTransform):
    """Turn a Markdown link to ``locking/<page>.md`` into one to locking's built page,
    before MyST resolves links (its resolver runs at priority 9)."""

    default_priority = 5

    def run(self, **kwargs) -> None:
        lockings = Path(self.app.srcdir).parent / "locking"
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            target = node.get("reftarget", "")
            if Path(target).is_absolute():  # a page outside this site's folder, by its path
                if not Path(target).is_relative_to(lockings):
                    continue
                page = Path(target).relative_to(lockings).as_posix()
            elif target.startswith(LOCKING_PAGES):  # "locking/…" from a page of docs/
                page = target.removeprefix(LOCKING_PAGES)
            else:
                continue
            page, _hash, anchor = page.partition("#")
            anchor = anchor or node.get("reftargetid") or ""
            depth = self.env.docname.count("/")
            uri = "../" * depth + LOCKING_SITE + page.removesuffix(".md") + ".html"
            link = nodes.reference(
                "", "", internal=False, refuri=uri + (f"#{anchor}" if anchor else "")
            )
            link += node[0].deepcopy() if len(node) else nodes.Text(target)
            node.replace_self(link)


def setup(app):
    app.add_post_transform(LinksToLockingsSite)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
