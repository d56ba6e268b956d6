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


class FencedWrite(models.Model):
    """One committed write under a fence, as the model-based checker records it: written in
    the fenced transaction, after the fence, so that ids follow the commit order of one
    resource's writers (the fence serializes them on the resource's record)."""

    resource = models.CharField(max_length=200)
    token = models.BigIntegerField()
    what = models.CharField(max_length=50)

    def __str__(self):
        return f"{self.resource} #{self.token} {self.what}"
