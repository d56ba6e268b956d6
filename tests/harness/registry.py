"""The frame's registries with some operations, or some apps' pages, taken out for a while."""

import contextlib
from collections.abc import Callable, Iterator

from hoa.operations import (
    FencedOperation,
    Pages,
    add_pages,
    every_pages,
    operations,
    register,
    remove_pages,
    unregister,
)


@contextlib.contextmanager
def operations_removed(
    which: Callable[[FencedOperation], bool],
) -> Iterator[list[FencedOperation]]:
    """Unregister the operations ``which`` selects, and the pages of their apps; register
    them again on exit. Yields the operations, so the caller can check that there were
    some."""
    removed = [operation for operation in operations() if which(operation)]
    apps = {operation.permission.partition(".")[0] for operation in removed}
    with pages_removed(lambda pages: pages.app in apps):
        for operation in removed:
            unregister(operation.name)
        try:
            yield removed
        finally:
            for operation in removed:
                register(operation)


@contextlib.contextmanager
def pages_removed(which: Callable[[Pages], bool]) -> Iterator[list[Pages]]:
    """Take back the pages ``which`` selects; add them again on exit. Yields them."""
    removed = [pages for pages in every_pages() if which(pages)]
    for pages in removed:
        remove_pages(pages)
    try:
        yield removed
    finally:
        for pages in removed:
            add_pages(pages)
