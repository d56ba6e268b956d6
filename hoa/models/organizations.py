"""Associations (``Organization``, with their time zone), their units and their staff, and
the floor under every model: which rows belong to an association (``TenantQuerySet``) and
the per-user note of the associations a user was found staff of (``staff_of``).

The resolver (``hoa.tenancy``), which reads organizations, and the other models, which
scope their rows, import both from here.
"""

from zoneinfo import ZoneInfo, available_timezones

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class TenantQuerySet(models.QuerySet):
    """A queryset of rows that belong to an organization through ``tenant_path``."""

    # Path from the model to its Organization, e.g. "organization" or "run__organization".
    tenant_path = "organization"

    def for_user(self, user):
        """Return the rows of the organizations ``user`` is staff of (all for superusers)."""
        if user is None or not user.is_authenticated or not user.is_active:
            return self.none()
        if user.is_superuser:
            return self
        prefix = f"{self.tenant_path}__" if self.tenant_path else ""
        return self.filter(**{f"{prefix}memberships__user": user})

    def for_organization(self, organization):
        """Return the rows that belong to ``organization``."""
        return self.filter(**{self.tenant_path or "pk": organization})


def staff_of(user) -> set:
    """The ids of the organizations ``user`` (this object) was found staff of by a query:
    ``Organization.has_staff``'s own, or the resolver's (``hoa.tenancy``). Nothing else
    adds to it. Kept on the user object like Django's permission cache: a request's, or a
    command's run, never across them."""
    return user.__dict__.setdefault("_hoa_staff_of", set())


def scope_for_organization(organization) -> str:
    """The audit scope of an association's fenced attempts (``FenceEvent.scope``): how they
    are tied to it without ``locking`` knowing associations."""
    return f"org:{organization.pk}"


class Priority(models.TextChoices):
    """A complaint's priority (``Complaint.Priority``): here, below complaints, because an
    association sets the hours of its SLA for each."""

    HIGH = "high", _("High")
    NORMAL = "normal", _("Normal")
    LOW = "low", _("Low")


class OrganizationQuerySet(TenantQuerySet):
    tenant_path = ""


def default_time_zone() -> str:
    """A new association's time zone: the deployment's ``TIME_ZONE``."""
    return settings.TIME_ZONE


def validate_time_zone(name: str) -> None:
    """An IANA time zone name this server knows (``Europe/Paris``, ``America/Chicago``)."""
    if name not in available_timezones():
        raise ValidationError(
            _("%(name)s is not a time zone name such as Europe/Paris."), params={"name": name}
        )


class Organization(models.Model):
    name = models.CharField(_("name"), max_length=200)
    slug = models.SlugField(_("slug"), max_length=80, unique=True)
    # SLA policy: hours allowed to resolve a complaint, per priority.
    sla_hours_high = models.PositiveIntegerField(_("SLA hours (high)"), default=24)
    sla_hours_normal = models.PositiveIntegerField(_("SLA hours (normal)"), default=72)
    sla_hours_low = models.PositiveIntegerField(_("SLA hours (low)"), default=168)
    # Where the association is: its staff pages show every time in it, read the times they
    # are given in it, and its months (the current one, the billing window) are its own.
    time_zone = models.CharField(
        _("time zone"),
        max_length=64,
        default=default_time_zone,
        validators=[validate_time_zone],
        help_text=_("An IANA name, e.g. America/New_York or Europe/Paris."),
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = OrganizationQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def sla_hours_for(self, priority: str) -> int:
        """Return the hours this organization allows for a complaint of ``priority``."""
        return {
            Priority.HIGH: self.sla_hours_high,
            Priority.NORMAL: self.sla_hours_normal,
            Priority.LOW: self.sla_hours_low,
        }[priority]

    def has_staff(self, user) -> bool:
        """Return whether ``user`` may act for this organization (asked once per user
        object: the answer is noted, ``staff_of``)."""
        if not user.is_authenticated or not user.is_active:
            return False
        if user.is_superuser:
            return True
        if self.pk not in staff_of(user):
            if not self.memberships.filter(user=user).exists():
                return False
            staff_of(user).add(self.pk)
        return True


class Unit(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="units")
    label = models.CharField(_("label"), max_length=50)
    monthly_assessment = models.DecimalField(
        _("monthly assessment"), max_digits=10, decimal_places=2, default=0
    )

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["organization", "label"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "label"], name="unit_label_unique_per_org"
            ),
            # What the composite foreign keys of rows that name a unit and its association
            # point at (a complaint's unit is one of its association's: hoa 0005).
            models.UniqueConstraint(fields=["id", "organization"], name="unit_of_organization"),
            models.CheckConstraint(
                condition=Q(monthly_assessment__gte=0), name="unit_assessment_not_negative"
            ),
        ]

    def __str__(self):
        return f"{self.organization} · {self.label}"


class StaffMembership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "organization"], name="membership_unique")
        ]

    def __str__(self):
        return f"{self.user} @ {self.organization}"
