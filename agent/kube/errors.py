"""The API errors, apart from the client so that callers that only catch them (publish,
facts, `check` on a bundle) do not import `requests` (~150 ms) until a request is made."""
from typing import Optional


class ApiError(Exception):
    """An HTTP answer other than 2xx, with the server's own message."""

    def __init__(self, status: int, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after


class Unreachable(Exception):
    """No usable answer: connection refused/reset, timeout, TLS failure, credentials failed."""
