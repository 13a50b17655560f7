"""Static assets (admin, bundled Swagger UI) served by daphne under STATIC_URL, with the API's error
envelope for every refusal.

Django's ASGIStaticFilesHandler answers a missing file with an HTML 404 page and lets a path that
resolves outside a static root (``/static/..%2f..%2fx``: SuspiciousFileOperation) escape as an
exception, which daphne turns into a 500 HTML page. Both are 404 ``not_found`` here, with no hint
of which paths exist outside the roots.
"""
from __future__ import annotations

from asgiref.sync import sync_to_async
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.http import Http404

from covel.errors import error_response


class StaticFilesASGI(ASGIStaticFilesHandler):
    """ASGIStaticFilesHandler whose refusals are JSON envelopes (404 not_found, cache: no-store)."""

    def serve(self, request):
        try:
            return super().serve(request)
        except (Http404, SuspiciousOperation):
            response = error_response(404, f"Not found: {request.path}", "not_found")
            response["Cache-Control"] = "no-store"
            return response

    async def get_response_async(self, request):
        # Same as Django's, without its Http404 → HTML branch (serve() no longer raises it).
        response = await sync_to_async(self.serve, thread_sensitive=False)(request)
        response._resource_closers.append(request.close)
        if response.streaming and not response.is_async:
            iterator = response.streaming_content

            async def parts():
                for part in await sync_to_async(list)(iterator):
                    yield part

            response.streaming_content = parts()
        return response
