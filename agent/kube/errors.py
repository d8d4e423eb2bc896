"""The API errors, apart from the client so that callers that only catch them (publish,
facts, `check` on a bundle) do not import `requests` (~150 ms) until a request is made."""
import re
from typing import Any, Dict, Optional

# What of a server's answer may reach a log line or the JSON: no control characters (a
# hostile or broken answer must not forge log lines or move the terminal), at most this many
# characters.
MESSAGE_LIMIT = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def sanitize(text: Any, limit: int = MESSAGE_LIMIT) -> str:
    """One printable line of at most ``limit`` characters (control characters become a space;
    a cut is marked with "...")."""
    line = _CONTROL.sub(" ", str(text)).strip()
    if len(line) > limit:
        line = line[: max(0, limit - 3)] + "..."
    return line


class ApiError(Exception):
    """An HTTP answer other than 2xx, with the server's own message (sanitised, bounded)."""

    def __init__(
        self,
        status: int,
        message: str,
        retry_after: Optional[float] = None,
        reason: Optional[str] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.status = status
        self.message = sanitize(message)
        self.retry_after = retry_after
        self.reason = reason  # the Status object's reason (Forbidden, Invalid, NotFound...)
        self.details = details or {}
        super().__init__(f"HTTP {status}: {self.message}")


class Unreachable(Exception):
    """No usable answer: connection refused/reset, timeout, TLS failure, credentials failed,
    or a 2xx whose body is not the object asked for."""
