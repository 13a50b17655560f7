"""Settings shapes: ``embedded`` (default), ``hosted`` (DATABASE_URL + REDIS_URL), ``test``, ``test_hosted``."""
import os


def default_settings_module() -> str:
    """The module manage.py / asgi.py use when DJANGO_SETTINGS_MODULE is unset.

    hosted when DATABASE_URL is set in the environment, embedded otherwise.
    """
    return "covel.settings.hosted" if os.environ.get("DATABASE_URL") else "covel.settings.embedded"
