"""One token bucket for every rate limit the agent keeps (failed basic-auth checks on the
metrics endpoint, Events on the Node): ``burst`` tokens, one more every ``refill_s`` seconds.
Times are from a monotonic clock, so a wall-clock step neither refills nor freezes a bucket."""


class TokenBucket:
    __slots__ = ("burst", "refill_s", "tokens", "at")

    def __init__(self, burst: int, refill_s: float, now: float) -> None:
        self.burst, self.refill_s = burst, refill_s
        self.tokens, self.at = float(burst), now

    def take(self, now: float) -> bool:
        """Spend a token if one is there (refilled up to ``now`` first)."""
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.at) / self.refill_s)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def give_back(self) -> None:
        """Return a token (never past the burst): the spend turned out not to count."""
        self.tokens = min(float(self.burst), self.tokens + 1.0)
