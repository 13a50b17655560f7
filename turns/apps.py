from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    label = "turns"
    # JSON fields that may mention media ids (see media.selectors.media_reference_tables).
    media_reference_fields = {"RuntimeOutput": ("output",), "TraceEvent": ("payload",), "TurnResult": ("summary",)}

    def ready(self) -> None:
        # Registers this app's task names, which services send by name (covel.taskqueue).
        from turns import tasks  # noqa: F401
