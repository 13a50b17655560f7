"""Registers the `ensemble` turn policy (never called by the orchestration reads)."""


def choose(request):
    raise AssertionError("orchestration reads must not run the service")


def register(api):
    api.register_service("turn-policy@1", choose, name="ensemble", label={"en": "Ensemble", "zh": "群像"})
