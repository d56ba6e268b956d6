"""Admin plumbing of the project: tenant scoping (staff see and edit only their
organizations' rows), the fence's bookkeeping for operators only, the frame's admins that
the apps built on it extend, and the read-only audit table."""

from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IS_POPUP_VAR
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import FieldDoesNotExist, PermissionDenied, ValidationError
from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from hoa.dates import zone_label
from hoa.models import Organization
from hoa.security.audit import Reason, deny_request
from hoa.security.permissions import is_operator
from hoa.web.fields import ADMIN_FORMFIELDS

# The fence's bookkeeping on the product's rows: locking's ``FencedModel.last_fence_token``
# and the token an assignment (or any fenced write) was made with.
FENCING_FIELDS = frozenset({"last_fence_token", "fence_token"})


@dataclass(frozen=True)
class AdminExtension:
    """What an app adds to the admin of a model of the frame (``"hoa.Complaint"``): actions
    (Django's ``(modeladmin, request, queryset)``, offered to users with ``permission``),
    list columns, inlines, and the ``queryset`` annotation its columns read.

    Registered from the app's ``admin`` module with ``extend``, as ``admin.site.register``
    is: the action calls the app's service, so only there can it be named without a
    dotted path."""

    model: str
    permission: str
    actions: tuple[Callable, ...] = ()
    columns: tuple[Callable, ...] = ()
    inlines: tuple[type, ...] = ()
    queryset: Callable[[QuerySet], QuerySet] | None = None


_extensions: list[AdminExtension] = []


def extend(extension: AdminExtension) -> AdminExtension:
    """Add ``extension`` to the admin of its model (from an app's ``admin`` module, which
    Django's admin imports at start-up); the same extension twice is added once."""
    if extension not in _extensions:
        _extensions.append(extension)
    return extension


def extensions_of(model) -> list[AdminExtension]:
    """What the apps add to the admin of ``model``."""
    label = model._meta.label
    return [extension for extension in _extensions if extension.model == label]


def _scoped_foreignkey(db_field, request, kwargs: dict) -> dict:
    """Offer only the user's organizations' rows in a foreign-key menu (of the rows the
    admin already narrowed it to, if it did)."""
    related = db_field.related_model
    rows = kwargs.get("queryset", related.objects.all())
    if related is Organization or (hasattr(rows, "for_user") and related._meta.app_label != "auth"):
        kwargs["queryset"] = rows.for_user(request.user)
    return kwargs


class OperatorFieldsMixin:
    """Show the fence's bookkeeping (``operator_fields``) to operators only.

    Office staff read the same rows as on their pages, in their words: no fencing token,
    no recorded token (``hoa.security.permissions``: operators are those who read leases,
    tokens and the fenced attempts). The fields leave every place an admin names them for
    anyone else: the changelist's columns, filters and search, the change page's fields, and
    the fields of every inline on it (an operation's too, ``ExtensibleAdmin``).
    """

    operator_fields = FENCING_FIELDS

    def _for_viewer(self, request, names):
        if is_operator(request.user):
            return names
        return type(names)(name for name in names if name not in self.operator_fields)

    def get_list_display(self, request):
        return self._for_viewer(request, list(super().get_list_display(request)))

    def get_list_filter(self, request):
        return self._for_viewer(request, list(super().get_list_filter(request)))

    def get_search_fields(self, request):
        return self._for_viewer(request, list(super().get_search_fields(request)))

    def get_fields(self, request, obj=None):
        return self._for_viewer(request, list(super().get_fields(request, obj)))

    def get_readonly_fields(self, request, obj=None):
        return self._for_viewer(request, list(super().get_readonly_fields(request, obj)))

    def get_inline_instances(self, request, obj=None):
        # Instances are made per request: narrowing theirs changes nobody else's page.
        inlines = super().get_inline_instances(request, obj)
        if is_operator(request.user):
            return inlines
        for inline in inlines:
            for attribute in ("fields", "readonly_fields"):
                names = getattr(inline, attribute, None)
                if names:
                    setattr(inline, attribute, self._for_viewer(request, list(names)))
        return inlines


def admin_zone(user) -> ZoneInfo:
    """The zone the admin shows ``user`` times in, and reads the times they type in.

    Office staff read their association's zone, as on its pages (the one zone of their
    associations, when they share one). Operators, and anyone whose associations are in
    several zones, read ``TIME_ZONE``, as on the lock page: the admin's lists span
    associations. Every time is labelled with its zone either way.
    """
    if not is_operator(user):
        zones = set(Organization.objects.for_user(user).values_list("time_zone", flat=True)[:50])
        if len(zones) == 1:
            return ZoneInfo(zones.pop())
    return ZoneInfo(settings.TIME_ZONE)


class ViewerZoneMixin:
    """Render and read an association's admin pages in the viewer's zone (``admin_zone``),
    and say the zone beside every date-and-time input."""

    def _in_zone(self, request, view, *args, **kwargs):
        with timezone.override(admin_zone(request.user)):
            response = view(request, *args, **kwargs)
            if hasattr(response, "render") and not response.is_rendered:
                response.render()  # a TemplateResponse renders here, in the zone
        return response

    def changelist_view(self, request, extra_context=None):
        return self._in_zone(request, super().changelist_view, extra_context)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return self._in_zone(request, super().changeform_view, object_id, form_url, extra_context)

    def history_view(self, request, object_id, extra_context=None):
        return self._in_zone(request, super().history_view, object_id, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        return self._in_zone(request, super().delete_view, object_id, extra_context)

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and isinstance(db_field, models.DateTimeField):
            zone = _("Time zone: %(zone)s.") % {"zone": zone_label()}
            field.help_text = f"{field.help_text} {zone}".strip()
        return field


class TenantAdminMixin(ViewerZoneMixin, OperatorFieldsMixin):
    """Limit changelists, change pages, actions, filters and foreign-key choices to the
    user's organizations.

    Every association's admin shows the fence's bookkeeping to operators only
    (``OperatorFieldsMixin``), and its times in the viewer's zone (``ViewerZoneMixin``).

    The model's default manager must be a ``TenantQuerySet`` manager. Objects of other
    organizations are simply not in the queryset, so their change pages answer 404-style
    ("doesn't exist") redirects exactly like missing objects, and an action POST naming
    their ids acts on none of them. Such attempts, and actions the user lacks the
    permission for, are audited (``hoa.security.audit``). Amounts are typed as on the staff
    pages (``MoneyField``).
    """

    formfield_overrides = ADMIN_FORMFIELDS

    def get_queryset(self, request):
        return super().get_queryset(request).for_user(request.user)

    def get_list_filter(self, request):
        # A plain related-field filter lists every row of the related model, other
        # associations' names included; this one lists only those the user's rows use.
        return [self._tenant_list_filter(entry) for entry in super().get_list_filter(request)]

    def _tenant_list_filter(self, entry):
        if not isinstance(entry, str):
            return entry
        try:
            fields = get_fields_from_path(self.model, entry)
        except (FieldDoesNotExist, NotRelationField):
            return entry
        return (entry, admin.RelatedOnlyFieldListFilter) if fields[-1].is_relation else entry

    def get_object(self, request, object_id, from_field=None):
        if from_field is None and not self._canonical_id(object_id):
            # /admin/…/017/change/ is not a second address of 17: the admin's "doesn't
            # exist", as the staff pages' <id:pk> answers 404.
            return None
        obj = super().get_object(request, object_id, from_field)
        if obj is None and from_field is None and self._ids_elsewhere(request, [object_id]):
            deny_request(
                request,
                reason=Reason.TENANT,
                note=f"{self.opts.label} {object_id} of another association",
            )
        return obj

    def changelist_view(self, request, extra_context=None):
        if request.method == "POST" and "action" in request.POST:
            self._audit_refused_action(request)
        return super().changelist_view(request, extra_context)

    def response_action(self, request, queryset):
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        if self._valid_ids(selected) is None:
            self.message_user(
                request, _("None of the selected items could be found."), messages.ERROR
            )
            return None
        foreign = self._ids_elsewhere(request, selected)
        if foreign:
            deny_request(
                request,
                reason=Reason.TENANT,
                note=f"action on {self.opts.label} {sorted(foreign)} of another association",
            )
        return super().response_action(request, queryset)

    def _audit_refused_action(self, request) -> None:
        declared = {"delete_selected"}
        declared |= {a if isinstance(a, str) else a.__name__ for a in self.actions or []}
        declared |= {
            action.__name__
            for extension in extensions_of(self.model)
            for action in extension.actions
        }
        refused = (set(request.POST.getlist("action")) & declared) - set(self.get_actions(request))
        if refused:
            deny_request(
                request,
                reason=Reason.PERMISSION,
                note=f"action {', '.join(sorted(refused))} on {self.opts.label}",
            )

    def _canonical_id(self, raw_id) -> bool:
        """Whether ``raw_id`` is written the one way its primary key is (no leading zero,
        sign, space or other script's digits)."""
        try:
            return str(self.opts.pk.to_python(raw_id)) == raw_id
        except (ValidationError, ValueError, TypeError):
            return False

    def _valid_ids(self, raw_ids) -> set | None:
        """The ids as primary-key values, or ``None`` if any is malformed or out of range."""
        pk = self.opts.pk
        try:
            ids = {pk.to_python(raw) for raw in raw_ids}
            for value in ids:
                pk.run_validators(value)
        except (ValidationError, ValueError, TypeError):
            return None
        return ids

    def _ids_elsewhere(self, request, raw_ids) -> set:
        """Which of ``raw_ids`` exist but are outside the user's organizations."""
        ids = self._valid_ids(raw_ids)
        if not ids:
            return set()
        mine = set(self.get_queryset(request).filter(pk__in=ids).values_list("pk", flat=True))
        others = self.model._default_manager.filter(pk__in=ids - mine)
        return set(others.values_list("pk", flat=True))

    def save_model(self, request, obj, form, change):
        # Write only what the staff member changed: a full save would write back columns
        # that jobs and fenced services changed while the form was open (an SLA breach, a
        # status), from the form's stale copy.
        if change:
            concrete = {field.name for field in obj._meta.concrete_fields}
            obj.save(update_fields=[name for name in form.changed_data if name in concrete])
        else:
            obj.save()

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        kwargs = _scoped_foreignkey(db_field, request, kwargs)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class FencedRecordAdmin(TenantAdminMixin, admin.ModelAdmin):
    """The admin of rows a fenced operation writes, kept as its record: never deleted, and
    added or changed by staff only while ``editable`` matches the row (``None``, the
    default: the operation alone writes them).

    A change is saved only if the row, locked, still matches: the operation's fence UPDATE
    takes the same row lock, so whichever comes second sees the other (a form opened on a
    draft that was approved since is refused, 403).
    """

    editable: Q | None = None

    def has_add_permission(self, request):
        return self.editable is not None and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None):
        if self.editable is None or not super().has_change_permission(request, obj):
            return False
        return obj is None or self._editable(obj).exists()

    def has_delete_permission(self, request, obj=None):
        return False

    def _editable(self, obj) -> QuerySet:
        return self.model._default_manager.filter(self.editable, pk=obj.pk)

    def save_model(self, request, obj, form, change):
        if change and not self._editable(obj).select_for_update().exists():
            raise PermissionDenied
        super().save_model(request, obj, form, change)


class SharedRowAdminMixin:
    """The admin of a row several associations rely on (a vendor under contract with two):
    staff change only what their association owns of it, never the row itself.

    ``relied_on_through`` names the paths from the model to the organizations that rely on
    a row (``"contracts__organization"``, ``"invoices__organization"``…). Staff who are not
    staff of every one of them (superusers excepted) get the row's own fields read-only
    (their association's inlines stay editable) and may not delete it: not from its delete
    page (403, audited by the site's 403 handler) nor with "delete selected", which names
    the rows it refused and deletes none.
    """

    relied_on_through: tuple[str, ...] = ()

    def relied_on_by(self, obj) -> set[int]:
        """The ids of the organizations that rely on ``obj``."""
        rows = self.model._default_manager.filter(pk=obj.pk)
        return {
            organization_id
            for path in self.relied_on_through
            for organization_id in rows.values_list(path, flat=True)
            if organization_id is not None
        }

    def shared_beyond(self, request, obj) -> bool:
        """Whether ``obj`` is relied on by an association ``request.user`` is not staff of."""
        if obj is None or request.user.is_superuser:
            return False
        theirs = set(Organization.objects.for_user(request.user).values_list("pk", flat=True))
        return not self.relied_on_by(obj) <= theirs

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and not self.shared_beyond(request, obj)

    def get_readonly_fields(self, request, obj=None):
        readonly = list(super().get_readonly_fields(request, obj))
        if self.shared_beyond(request, obj):
            own = [field.name for field in self.opts.fields if field.editable]
            readonly += [name for name in own if name not in readonly]
        return readonly

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        shared = [obj for obj in objs if self.shared_beyond(request, obj)]
        if shared:
            # Django's delete confirmation refuses while ``perms_needed`` names anything.
            perms_needed = {*perms_needed, *(str(obj) for obj in shared)}
            deny_request(
                request,
                reason=Reason.PERMISSION,
                note=f"delete {self.opts.label} {sorted(o.pk for o in shared)} relied on "
                "by another association",
            )
        return deleted, counts, perms_needed, protected


class ExtensibleAdmin:
    """The admin of a frame model, with what the apps add to it (``extend``).

    An app registers an ``AdminExtension`` for a model of the frame (the Organization admin
    gains an action per organization, the Complaint admin a column, an inline and an action
    per complaint); this mixin installs each on the admin it extends: its actions for users
    with the extension's permission, its columns after the admin's own, its inlines, and
    the annotations its columns read. No app unregisters another's admin to subclass it, so
    two apps extending one admin both show.
    """

    def get_actions(self, request):
        actions = super().get_actions(request)
        if self.actions is None or IS_POPUP_VAR in request.GET:
            return actions
        for extension in extensions_of(self.model):
            if request.user.has_perm(extension.permission):
                for action in extension.actions:
                    function, name, description = self.get_action(action)
                    actions[name] = (function, name, description)
        return actions

    def get_list_display(self, request):
        columns = [column for ext in extensions_of(self.model) for column in ext.columns]
        return [*super().get_list_display(request), *columns]

    def get_inlines(self, request, obj):
        inlines = [inline for ext in extensions_of(self.model) for inline in ext.inlines]
        return [*super().get_inlines(request, obj), *inlines]

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        for extension in extensions_of(self.model):
            if extension.queryset is not None:
                queryset = extension.queryset(queryset)
        return queryset


class TenantInlineMixin:
    """The same scoping for an inline: its rows and foreign-key menus, the user's only.

    Needed where the parent is shared between organizations (a vendor under contract with
    several): without it, the inline would list, and offer to add, other associations'
    rows.
    """

    formfield_overrides = ADMIN_FORMFIELDS

    def get_queryset(self, request):
        return super().get_queryset(request).for_user(request.user)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        kwargs = _scoped_foreignkey(db_field, request, kwargs)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class AuditTrailAdmin(admin.ModelAdmin):
    """An audit table spans tenants: superusers read it; nobody edits or deletes it, not
    even a superuser (no delete action, 403 on the delete page). Only the pruning
    commands remove rows, past their retention."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
