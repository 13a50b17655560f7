from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "sessions"
    # django.contrib.sessions already owns the label "sessions".
    label = "covel_sessions"
    verbose_name = "Covel sessions and worlds"
