"""ASGI entry point served by daphne: HTTP (REST + SSE streaming) through Channels' ProtocolTypeRouter."""
import os

from covel.settings import default_settings_module

os.environ.setdefault("DJANGO_SETTINGS_MODULE", default_settings_module())

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()
if settings.COVEL_SERVE_STATIC:
    # Admin and API-docs assets under /static/, so `make run` needs no separate static server.
    from covel.static import StaticFilesASGI

    django_asgi = StaticFilesASGI(django_asgi)

from covel.asgi_limits import BodyLimitASGI  # noqa: E402
from covel.startup import on_asgi_startup  # noqa: E402

on_asgi_startup()

from turns.event_stream import EventStreamThreadContext  # noqa: E402

# EventStreamThreadContext outermost (it passes every other scope through): once Django has sent a
# stream's head, nothing else stays on the stack of an open event stream, not even its scope
# (README "Event fan-out").
application = EventStreamThreadContext(ProtocolTypeRouter({"http": BodyLimitASGI(django_asgi)}))
