"""``on_commit_robust``: a robust after-commit hook with arguments, safe on Django 5.2.

``transaction.on_commit(func, robust=True)`` catches what ``func`` raises and logs it as
``f"Error calling {func.__qualname__} …"``. A ``functools.partial`` has no ``__qualname__``:
the ``AttributeError`` raised while logging escapes the hook, so a request whose
transaction committed answers 500, and the hooks queued after it never run (Django
ticket #36487, fixed in 6.1). A close of an assigned complaint met it while PostgreSQL was
partitioned (its vendor-cancellation hook could not read the assignment); so would a
notice delivery that fails in ``publish_notices``.
"""

from collections.abc import Callable
from functools import partial, update_wrapper

from django.db import transaction


def on_commit_robust(func: Callable[..., object], /, *args: object, using: str | None = None):
    """Run ``func(*args)`` once the current transaction commits; log, never raise, what
    it raises (Django's ``robust=True``), naming ``func`` in the log line."""
    hook = update_wrapper(partial(func, *args), func)
    transaction.on_commit(hook, using=using, robust=True)
