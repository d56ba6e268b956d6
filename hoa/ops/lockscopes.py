"""What an operator may see of the locks in locking's admin: this project's
``LOCK_SCOPES_CALLABLE``.

locking knows nothing of associations: it asks which audit scopes a user may read and which
scope a resource name is in. Here a scope is an association (``org:<id>``,
``hoa.models.scope_for_organization``, as every fenced attempt is recorded); a user reads
the associations they are staff of, a superuser every one (``Viewer``, the lock status
page's rule); and a resource is in the association its fenced operation says it is
(``hoa.operations.describe_resources``), so a lease that has no audit row yet is placed as
well as one that has. A name no operation claims is in no association: only a superuser sees
it.
"""

from collections.abc import Collection

from hoa.models import Organization, scope_for_organization
from hoa.operations import describe_resources
from hoa.ops.lockstatus import Viewer
from locking.operators import ViewerScopes


def lock_scopes(user, resources: Collection[str]) -> ViewerScopes:
    """The scopes ``user`` may read (``None``: the operator at the shell, who reads every
    one), and the association's scope of each of ``resources``."""
    described = describe_resources(resources)
    placed = {
        resource: scope_for_organization(info.organization) if info.organization else ""
        for resource, info in described.items()
    }
    if user is None:
        return ViewerScopes(visible=None, resources=placed)
    viewer = Viewer.of(user)
    if viewer.sees_everything:
        return ViewerScopes(visible=None, resources=placed)
    visible = frozenset(
        scope_for_organization(Organization(pk=pk)) for pk in viewer.organization_ids
    )
    return ViewerScopes(visible=visible, resources=placed)
