"""The fenced-operation registry with some operations taken out for a while."""

import contextlib
from collections.abc import Callable, Iterator

from hoa.operations import FencedOperation, operations, register, unregister


@contextlib.contextmanager
def operations_removed(
    which: Callable[[FencedOperation], bool],
) -> Iterator[list[FencedOperation]]:
    """Unregister the operations ``which`` selects; register them again on exit. Yields
    them, so the caller can check that there were some."""
    removed = [operation for operation in operations() if which(operation)]
    for operation in removed:
        unregister(operation.name)
    try:
        yield removed
    finally:
        for operation in removed:
            register(operation)
