from django.db import models

from locking.models import FencedModel


class Invoice(FencedModel):
    """An invoice is sent once: its row is the fence of the resource ``invoice:<pk>``."""

    number = models.CharField(max_length=20, unique=True)
    sent_with_token = models.BigIntegerField(null=True, blank=True)
    note = models.CharField(max_length=100, blank=True, default="")

    def __str__(self):
        return self.number
