"""Parallel test runs (pytest-xdist): each worker its own Redis database, and a module's
``xdist_group`` kept on one worker (``make_group_scheduler``).

Worker ``gwN`` uses database ``base + N`` of the same server (``base``: the URL's, 1 in
``make test``). The test settings call ``isolate_redis_databases()`` before reading the
environment; it rewrites ``REDIS_URL`` and ``LOCK_REDIS_URL`` in ``os.environ`` once per
worker (``ISOLATED_FOR``), so children inherit them. docs/testing.md, "How the suite runs
in parallel".
"""

import os
import re
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

WORKER = "PYTEST_XDIST_WORKER"
ISOLATED_FOR = "LOCKING_TESTS_REDIS_ISOLATED_FOR"
URL_VARIABLES = ("REDIS_URL", "LOCK_REDIS_URL")
# redis-server's default ``databases 16``: indexes 0-15.
REDIS_DATABASES = 16


class WorkerIsolationError(RuntimeError):
    pass


def worker_index(worker: str | None) -> int | None:
    """``gw3`` -> 3; ``None`` (no xdist, or the controller) -> ``None``."""
    if not worker:
        return None
    digits = worker.removeprefix("gw")
    if not digits.isdigit():
        raise WorkerIsolationError(f"unexpected pytest-xdist worker id {worker!r}")
    return int(digits)


def worker_redis_url(url: str, index: int) -> str:
    """``url`` moved from its database ``base`` to ``base + index``.

    Only single-server URLs (``redis://``, ``rediss://``) have a database to move; a
    Sentinel or Cluster URL is returned as it is (the tests of those topologies start
    servers of their own).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    path = parts.path.strip("/")
    base = int(path) if path.isdigit() else 0
    database = base + index
    if database >= REDIS_DATABASES:
        raise WorkerIsolationError(
            f"worker {index} would need Redis database {database} of {url}: the server has "
            f"{REDIS_DATABASES} (0-{REDIS_DATABASES - 1}); run fewer workers (PYTEST_WORKERS)"
        )
    return urlunsplit(parts._replace(path=f"/{database}"))


def isolate_redis_databases(environ=os.environ) -> None:
    """Move ``REDIS_URL`` and ``LOCK_REDIS_URL`` to this xdist worker's Redis database."""
    worker = environ.get(WORKER)
    index = worker_index(worker)
    if index is None or environ.get(ISOLATED_FOR) == worker:
        return
    for name in URL_VARIABLES:
        if environ.get(name):
            environ[name] = worker_redis_url(environ[name], index)
    environ[ISOLATED_FOR] = worker


# -- one worker for a module -------------------------------------------------------------------

# pytest-xdist 3.8's ``--dist loadgroup`` renames a grouped test's node id on the worker
# (``item._nodeid``), which pytest 9 no longer reads: the groups are silently ignored. So the
# controller finds them itself, in the source of each test module: a module whose
# ``pytestmark`` carries ``pytest.mark.xdist_group("name")`` runs on one worker.
_GROUP = re.compile(r"""xdist_group\(\s*(?:name\s*=\s*)?["']([^"']+)["']""")


@cache
def module_group(path: Path) -> str | None:
    """The ``xdist_group`` named in the test module at ``path``, or ``None``."""
    try:
        match = _GROUP.search(path.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def make_group_scheduler(config, log):
    """``pytest_xdist_make_scheduler`` for ``--dist loadgroup``: each test goes to whichever
    worker is free, except the tests of a module in an ``xdist_group``, which go to one."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = module_group(config.rootpath / nodeid.split("::", 1)[0])
            return f"group:{group}" if group else super()._split_scope(nodeid)

    return ModuleGroupScheduling(config, log)
