from django.apps import AppConfig


class PluginsAppConfig(AppConfig):
    name = "plugins_app"
    label = "plugins_app"
    # JSON fields that may mention media ids (see media.selectors.media_reference_tables).
    media_reference_fields = {"PluginData": ("value",)}
