"""JSON log lines for the hosted shape: one object per record, request fields flattened."""
from __future__ import annotations

import datetime as dt
import json
import logging


class JsonFormatter(logging.Formatter):
    """Render a record as one JSON line: ts, level, logger, msg, plus any ``extra={"fields": {...}}``."""

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": dt.datetime.fromtimestamp(record.created, tz=dt.timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            payload.update(fields)
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False, default=str)
