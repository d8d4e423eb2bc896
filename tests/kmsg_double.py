"""A test double of /dev/kmsg for bursts: one XID 13 record per read(), generated lazily (a
pre-built list would dominate the memory measured), with an optional EPIPE after which
`drop` records are gone, as when the ring buffer overran the reader (kernel
Documentation/ABI/testing/dev-kmsg). Used by tests/unit/test_kmsg_burst.py and
bench/bench_kmsg.py, so the test and the figure read the same device."""

XID13 = ("NVRM: Xid (PCI:0000:2a:00): 13, pid={pid}, name=train, Graphics SM Warp Exception on "
         "(GPC 1, TPC 0, SM 1): Out Of Range Address")


class BurstDevice:
    def __init__(self, n, epipe_at=None, drop=0):
        self.n, self.seq, self.epipe_at, self.drop = n, 0, epipe_at, drop

    def read(self, size):
        if self.epipe_at is not None and self.seq == self.epipe_at:
            self.epipe_at = None
            self.seq += self.drop
            raise BrokenPipeError(32, "Broken pipe")
        if self.seq >= self.n:
            raise BlockingIOError(11, "EAGAIN")
        self.seq += 1
        msg = XID13.format(pid=4000 + self.seq % 7)
        return f"3,{self.seq},{1_000_000 + self.seq * 10},-;{msg}\n".encode()
