"""A URLconf for one test: an /api/ view that raises an unexpected exception."""
from django.urls import include, path

from covel.urls import urlpatterns as real_patterns


def explode(request):
    raise RuntimeError("secret internal detail\nsecond line of the stack")


urlpatterns = [path("api/boom", explode), *real_patterns]
