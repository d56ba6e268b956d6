from django.apps import AppConfig


class ChargesConfig(AppConfig):
    name = "charges"
    verbose_name = "Charges"
