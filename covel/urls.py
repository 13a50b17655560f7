from django.contrib import admin
from django.urls import include, path

from covel.api import api
from covel.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    # Prometheus scrape target (covel/metrics.py); operator token in the demo/commercial tiers.
    path("metrics", metrics_view, name="metrics"),
    # Public plugin view files (spec 004 GET /plugin-assets/:pluginId/:digest/*), outside /api/.
    path("plugin-assets/", include("plugins_app.urls")),
]
