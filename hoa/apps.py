from django.apps import AppConfig


class HoaConfig(AppConfig):
    name = "hoa"
    verbose_name = "Associations"
