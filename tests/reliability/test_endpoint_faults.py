"""Fault matrix, metrics endpoint rows: slowloris (500 idle and trickling connections from
500 loopback addresses), a per-address connection flood, and a basic-auth password flood."""
import base64
import contextlib
import threading
import time

import bcrypt

from agent.outputs import http_conns, webconfig
from agent.outputs import metrics_server as httpserver
from agent.outputs.metrics_server import MetricsServer
from agent.outputs.webconfig import load_web_config
from tests.integration.agentproc import BUNDLES, start_agent, wait_for
from tests.reliability.helpers import (
    PARTIAL,
    connect_from,
    loopback,
    raise_nofile,
    scrape,
    slowloris,
    still_open,
)

ATTACKERS = 500
SCRAPES = 100


def test_slowloris_500_idle_connections_leave_the_scraper_answered(tmp_path):
    """Row "slowloris": >= 99% of scrapes from 127.0.0.1 answered (200) within a 10 s scrape
    timeout while 500 other loopback addresses hold idle or trickling connections. Before the
    fix 64 idle connections took every slot and 0 of 26 scrapes were answered."""
    raise_nofile(ATTACKERS * 2 + 256)
    agent, port = start_agent(tmp_path, ["--bundle", str(BUNDLES / "host-foundation-only")],
                              "run:\n  fast_interval: 600\n")
    stop = threading.Event()
    holders = []
    attacker = threading.Thread(target=slowloris, args=(port, ATTACKERS, stop, holders),
                                daemon=True)
    try:
        attacker.start()
        wait_for(lambda: len(holders) == ATTACKERS, 60, "500 attacker connections")
        held = sum(still_open(s) for s in holders)
        assert held >= ATTACKERS * 0.98, f"only {held} attacker connections were held"
        answered = 0
        for _ in range(SCRAPES):
            try:
                status, body = scrape(port, timeout=10.0)
                answered += status == 200 and b"gpu_node_agent_gate_open" in body
            except OSError:
                pass
            time.sleep(0.05)
        assert answered >= 0.99 * SCRAPES, f"{answered}/{SCRAPES} scrapes answered"
        assert agent.popen.poll() is None
    finally:
        stop.set()
        attacker.join(10)
        for sock in holders:
            sock.close()
        agent.stop()


def test_one_address_is_capped_and_others_still_get_in():
    """Row "per-address flood": 60 connections from one address hold at most
    MAX_PER_ADDRESS (32) connections; a scraper from another address is answered."""
    srv = MetricsServer("127.0.0.1:0", None, b"a_metric 1\n")
    srv.start()
    socks = []
    try:
        for _ in range(60):
            with contextlib.suppress(OSError):
                socks.append(connect_from("127.0.0.3", srv.port))
        wait_for(lambda: srv.stats["refused_per_address"] >= 28, 10, "refusals")
        assert sum(still_open(s) for s in socks) == 32 == http_conns.MAX_PER_ADDRESS
        assert scrape(srv.port) == (200, b"a_metric 1\n")
    finally:
        for s in socks:
            s.close()
        srv.stop()


def test_a_request_trickled_past_its_deadline_is_dropped_without_a_worker(monkeypatch):
    """Row "slowloris, one connection": a request that does not complete within
    REQUEST_TIMEOUT_S of its first byte is closed, however often bytes arrive."""
    monkeypatch.setattr(httpserver, "REQUEST_TIMEOUT_S", 1.0)
    srv = MetricsServer("127.0.0.1:0", None, b"a_metric 1\n")
    srv.start()
    sock = connect_from("127.0.0.4", srv.port)
    try:
        sock.sendall(PARTIAL)
        closed_after = None
        for i in range(40):  # a byte every 0.1 s: a per-recv timeout would never fire
            try:
                sock.send(b"X")
            except OSError:
                closed_after = i
                break
            if not still_open(sock):
                closed_after = i
                break
            time.sleep(0.1)
        assert closed_after is not None, "a trickled request held its connection for 4 s"
        assert srv.stats["timed_out"] >= 1
    finally:
        sock.close()
        srv.stop()


def _basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_auth_flood_runs_a_bounded_number_of_bcrypt_checks(tmp_path):
    """Row "auth flood": 300 wrong passwords from one address and 10 x 30 from ten others
    run at most ADDR_BURST + GLOBAL_BURST bcrypt checks (the rate limit's clock is frozen, so
    no token comes back during the flood); the rest are 429 or a cached 401. The scraper's
    right password from 127.0.0.1 is answered 200 throughout."""
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(4)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    web = load_web_config(str(cfg))
    web.limiter.clock = lambda: 1000.0
    srv = MetricsServer("127.0.0.1:0", web, b"a_metric 1\n")
    srv.start()
    try:
        assert scrape(srv.port, headers=_basic("prom", "right"))[0] == 200
        statuses = []
        for i in range(300):
            statuses.append(scrape(srv.port, headers=_basic("prom", f"wrong{i}"),
                                   source="127.0.0.2")[0])
        for a in range(10):
            for i in range(30):
                statuses.append(scrape(srv.port, headers=_basic("prom", f"x{a}-{i}"),
                                       source=loopback(10 + a))[0])
            assert scrape(srv.port, headers=_basic("prom", "right"))[0] == 200
        # 1 for the scraper, 5 for 127.0.0.2, 20 shared by the ten others
        assert web.bcrypt_checks <= 1 + webconfig.ADDR_BURST + webconfig.GLOBAL_BURST
        assert statuses.count(429) >= 600 - webconfig.ADDR_BURST - webconfig.GLOBAL_BURST
        assert set(statuses) <= {401, 429}
        before = web.bcrypt_checks
        for _ in range(50):  # the same wrong password again: a cached verdict, no bcrypt
            assert scrape(srv.port, headers=_basic("prom", "wrong0"), source="127.0.0.2")[0] == 401
        assert web.bcrypt_checks == before
    finally:
        srv.stop()


def test_the_rate_limit_refills_on_the_monotonic_clock():
    """The per-address bucket gets a token back every ADDR_REFILL_S of monotonic time, and a
    wall-clock step does nothing to it (it never reads the wall clock)."""
    now = [0.0]
    limiter = webconfig.AuthLimiter(clock=lambda: now[0])
    assert [limiter.allow("127.0.9.9") for _ in range(6)] == [True] * 5 + [False]
    now[0] += webconfig.ADDR_REFILL_S
    assert limiter.allow("127.0.9.9") and not limiter.allow("127.0.9.9")


def test_tls_keep_alive_and_a_plain_client_on_the_tls_port(tmp_path):
    """Row "hostile TLS client": plain HTTP to the TLS port is dropped at the handshake (no
    worker taken) while a TLS scraper reuses one connection for several scrapes."""
    import http.client
    import ssl

    from tests.unit.test_metrics_endpoint import make_cert

    make_cert(tmp_path)
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n")
    srv = MetricsServer("127.0.0.1:0", load_web_config(str(cfg)), b"a_metric 1\n")
    srv.start()
    plain = connect_from("127.0.0.5", srv.port)
    try:
        plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        ctx = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, timeout=10, context=ctx)
        for _ in range(3):
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (200, b"a_metric 1\n")
        conn.close()
        wait_for(lambda: not still_open(plain), 10, "the plain client dropped")
    finally:
        plain.close()
        srv.stop()
