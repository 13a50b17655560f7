"""URLs of this app outside the API: /plugin-assets/ (included by covel.urls)."""
from django.urls import re_path

from plugins_app.views import plugin_asset

urlpatterns = [
    # Everything under /plugin-assets/ reaches the view, so every refusal is its JSON 404.
    re_path(r"^(?P<rest>.*)$", plugin_asset, name="plugin-asset"),
]
