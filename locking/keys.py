"""Resource names and the Redis keys derived from them.

``lock:{<resource>}`` holds the lease, ``fence:{<resource>}`` the token counter (never
deleted, never expiring), ``seed:{<resource>}`` a short claim while a new epoch is recorded
after Redis lost the counter. The braces
are a Redis Cluster hash tag: both keys hash to one slot, so one script may touch both.
"""

MAX_RESOURCE_LENGTH = 200


def validate_resource(resource: str) -> str:
    """Return ``resource`` if it is a usable name, else raise ``ValueError``.

    Checked before any Redis call: non-empty, at most 200 characters, printable, no
    whitespace, no ``{`` or ``}`` (they would break the hash tag).
    """
    if not isinstance(resource, str):
        raise ValueError(f"resource name must be a string, got {type(resource).__name__}")
    if not resource:
        raise ValueError("resource name must not be empty")
    if len(resource) > MAX_RESOURCE_LENGTH:
        raise ValueError(f"resource name is longer than {MAX_RESOURCE_LENGTH} characters")
    # isprintable() is False for every whitespace character but the ASCII space.
    if not resource.isprintable() or " " in resource:
        raise ValueError("resource name must be printable and contain no whitespace")
    if "{" in resource or "}" in resource:
        raise ValueError("resource name must not contain '{' or '}'")
    return resource


def resource_kind(resource: str) -> str:
    """Return the kind of a resource: its name up to the first ``:`` (``monthly-charges``).

    What spans and metrics name instead of the resource itself, whose name carries tenant
    and row ids (a label per resource would grow without bound)."""
    return resource.partition(":")[0]


def lock_key(resource: str) -> str:
    """Return the Redis key of ``resource``'s lease: ``lock:{<resource>}``."""
    return "lock:{" + resource + "}"


def fence_key(resource: str) -> str:
    """Return the Redis key of ``resource``'s token counter: ``fence:{<resource>}``."""
    return "fence:{" + resource + "}"


def seed_key(resource: str) -> str:
    """A short-lived claim by the one caller recording a new epoch (locking/epochs.py)."""
    return "seed:{" + resource + "}"


def resource_from_lock_key(key: str) -> str:
    return key[len("lock:{") : -1]
