from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # django.contrib.sessions already owns the label "sessions".
    label = "covel_sessions"
    verbose_name = "Covel sessions and worlds"
    # JSON fields that may mention media ids (media.selectors scans every app's declaration, so the
    # media app needs no import of the apps above it).
    media_reference_fields = {"ChatMessage": ("content", "metadata"), "Snapshot": ("data",)}
