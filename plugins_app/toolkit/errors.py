"""Tool error codes and the ToolError a tool raises (spec 000, 统一返回格式与错误码)."""

from __future__ import annotations

from typing import Any

INVALID_INPUT = "invalid-input"
NOT_FOUND = "not-found"
AMBIGUOUS = "ambiguous"
REFUSED = "refused"
UNAVAILABLE = "unavailable"
TIMEOUT = "timeout"
CONFLICT = "conflict"
CANCELLED = "cancelled"
INTERNAL = "internal"

#: The only list of tool error codes (SDK TOOL_ERROR_CODES).
TOOL_ERROR_CODES: tuple[str, ...] = (
    INVALID_INPUT,
    NOT_FOUND,
    AMBIGUOUS,
    REFUSED,
    UNAVAILABLE,
    TIMEOUT,
    CONFLICT,
    CANCELLED,
    INTERNAL,
)

#: Longest message an author's ToolError keeps (characters).
TOOL_ERROR_MESSAGE_MAX_CHARS = 2000


class ToolError(Exception):
    """A readable tool failure the model sees as `{error: {code, message, hint?}}`.

    code: one of TOOL_ERROR_CODES (ValueError otherwise).
    message: cut to 2000 characters. hint: optional, English.
    details: optional structured data for traces (e.g. validation issues); not sent to the model.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        hint: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        if code not in TOOL_ERROR_CODES:
            raise ValueError(f"unknown tool error code {code!r}")
        message = str(message)[:TOOL_ERROR_MESSAGE_MAX_CHARS]
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.details = details

    def __repr__(self) -> str:
        return f"ToolError({self.code!r}, {self.message!r})"


class ToolValidationError(ToolError):
    """ToolError with code `invalid-input` (arguments need fixing)."""

    def __init__(self, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(INVALID_INPUT, message, hint=hint, details=details)


class ToolDefinitionError(ValueError):
    """A tool definition is invalid; the message starts `Tool "<name>":` (spec 000, 注解与超时)."""


class ToolRegistrationError(ValueError):
    """A plugin's registration batch was rejected and rolled back (spec 000, 目录与访问边界)."""
