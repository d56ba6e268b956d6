"""The smallest fenced rows, for locking's own tests (no model of any project)."""

from django.db import models

from locking.models import FencedModel


class Box(models.Model):
    """What a fenced thing may belong to: a relation for querysets that join."""

    label = models.CharField(max_length=50)

    def __str__(self):
        return self.label


class FencedThing(FencedModel):
    """A row written only under the fence: a name, and ``last_fence_token``."""

    name = models.CharField(max_length=100)
    box = models.ForeignKey(
        Box, null=True, blank=True, on_delete=models.CASCADE, related_name="things"
    )

    def __str__(self):
        return self.name
