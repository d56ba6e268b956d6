"""Audit scopes: how FenceEvents are tied to an organization without the locking app
knowing about organizations."""


def scope_for_organization(organization) -> str:
    return f"org:{organization.pk}"
