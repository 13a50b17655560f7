from django.apps import AppConfig


class PluginsAppConfig(AppConfig):
    name = "plugins_app"
    label = "plugins_app"
