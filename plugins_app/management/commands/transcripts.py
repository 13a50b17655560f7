"""``python manage.py transcripts``: (re)write the builtin worlds' scripted transcripts.

Plays plugins_app/management/transcripts.PLAYS — one session per builtin world and locale, ten
fixed turns with the offline ``scripted`` model — in-process through the public HTTP API
(django.test.Client against the configured database) and writes each as
``<out>/<world>.<locale>.md``. Session ids are fixed, so the prose is the same on every run; use a
fresh database (``make transcripts`` runs this under a throw-away COVEL_HOME).
"""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from plugins_app.management.play_client import PlayError
from plugins_app.management.transcripts import PLAYS, transcript_play


class Command(BaseCommand):
    help = "Write docs/examples/<world>.<locale>.md: 10 scripted turns per builtin world and locale."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--out", default="docs/examples", help="directory for the transcripts (default docs/examples)")
        parser.add_argument("--world", action="append", default=None, help="only this world (repeatable)")

    def handle(self, *args, **options) -> None:
        import logging

        from django.conf import settings
        from django.test import Client

        if getattr(settings, "STORE_BACKEND", "sqlite") != "sqlite" or not getattr(settings, "COVEL_INPROCESS_WORKER", False):
            raise CommandError("transcripts play in-process: run them on the embedded shape (make transcripts)")
        for name in ("covel.request", "celery.app.trace"):  # one INFO line per request/task otherwise
            logging.getLogger(name).setLevel(logging.WARNING)
        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        client = Client(HTTP_HOST="127.0.0.1")
        for world_id, locales in PLAYS.items():
            if options["world"] and world_id not in options["world"]:
                continue
            for locale in locales:
                sid = f"{world_id}-{locale.lower()}-transcript"[:64]
                try:
                    played = transcript_play(client, world_id, locale, session_id=sid)
                except PlayError as exc:
                    hint = " (the session exists already: run on a fresh database, as make transcripts does)" if "→ 409" in str(exc) else ""
                    raise CommandError(f"{world_id} ({locale}): {exc}{hint}") from None
                path = out / f"{world_id}.{locale}.md"
                path.write_text(played.markdown(), encoding="utf-8")
                self.stdout.write(f"{path}: {len(played.turns)} turns")
