"""Who operates the fence: the people who read leases, tokens and the fenced attempts.

Office staff run the association (its complaints and fenced operations) and are told
what happened in their words; operators run the platform: they read the lock status page,
tokens and the audit of fenced attempts, and break a stuck lease. An operator is a
superuser or a user with locking's permissions (the demo's "Operators" group has them).
"""

OPERATOR_PERMISSIONS = ("locking.view_fenceevent", "locking.break_lease")


def is_operator(user) -> bool:
    """Whether ``user`` sees the fencing internals (tokens, leases, fenced attempts)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return user.is_superuser or any(user.has_perm(perm) for perm in OPERATOR_PERMISSIONS)
