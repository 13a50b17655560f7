from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    label = "turns"
