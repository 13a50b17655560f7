"""Settings shapes: ``embedded`` (default), ``hosted`` (DATABASE_URL + REDIS_URL), ``test``, ``test_hosted``."""
import os


def default_settings_module() -> str:
    """The module manage.py / asgi.py use when DJANGO_SETTINGS_MODULE is unset.

    STORE_BACKEND (spec 004 §存储后端: sqlite | pg | memory) picks it: ``pg`` is hosted; ``sqlite``
    and ``memory`` are embedded. Unset, DATABASE_URL in the environment means hosted (pg).
    """
    store = os.environ.get("STORE_BACKEND", "").strip()
    if store == "pg" or (not store and os.environ.get("DATABASE_URL")):
        return "covel.settings.hosted"
    return "covel.settings.embedded"
