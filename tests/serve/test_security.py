"""The guards of the HTTP app: the Host check (DNS rebinding), no CORS, log lines of refusals
rate-limited, and aiohttp's own parser refusals in one line without a traceback."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from edgepipe.serve import ServeConfig
from edgepipe.serve.security import LogBudget, is_loopback_host

from .conftest import Camera, serving

pytestmark = pytest.mark.timeout(30)
TOKEN = "s3cret-token-123"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True), ("127.0.0.1:8080", True), ("localhost", True), ("LocalHost:1", True),
        ("[::1]", True), ("[::1]:8080", True), ("127.9.9.9:80", True),
        ("::1", False), ("evil.example", False), ("127.0.0.1.nip.io", False), ("localhost.evil.com:80", False),
        ("[::1", False), ("127.0.0.1:", False), ("127.0.0.1:http", False), ("127.0.0.1:80:80", False),
        ("0.0.0.0", False), ("10.0.0.7:8080", False), ("", False), ("127.0.0.1:\uff18\uff10", False),
    ],
)  # fmt: skip
def test_loopback_host_names(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_a_log_budget_logs_a_few_lines_per_window_then_counts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    clock = Clock()
    budget = LogBudget(logging.getLogger("test.budget"), lines=2, window_s=10.0, clock=clock)
    logged = [budget.warning("refused %d", i) for i in range(50)]
    assert logged[:3] == [True, True, False]
    assert [r.getMessage() for r in caplog.records] == ["refused 0", "refused 1"]
    assert budget.suppressed == 48
    clock.now += 10.0
    assert budget.warning("refused %d", 50)
    assert caplog.records[-1].getMessage() == "refused 50 (48 more like it not logged)"
    assert budget.suppressed == 0
    assert budget.total_suppressed == 48


async def _status(session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> int:
    async with session.get(url, headers=headers) as r:
        assert "Access-Control-Allow-Origin" not in r.headers  # a cross-origin page reads nothing
        return r.status


async def test_on_loopback_a_foreign_host_header_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="edgepipe.serve")
    async with serving(Camera()) as (url, _), aiohttp.ClientSession() as session:
        port = url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "[::1]", "localhost"):
            assert await _status(session, f"{url}/graph", {"Host": host}) == 200, host
        assert not caplog.records
        # A page of evil.example whose name now resolves to 127.0.0.1 (DNS rebinding).
        evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        for path in ("/graph", "/metrics", "/health", "/offer"):
            assert await _status(session, url + path, evil) == 403
        assert len(caplog.records) == 4
        assert "GET /graph: refused: Host evil.example:" in caplog.records[0].getMessage()
        # No CORS: a preflight is not answered with permission.
        async with session.options(f"{url}/offer", headers={**evil, "Host": f"127.0.0.1:{port}",
                                   "Access-Control-Request-Method": "POST"}) as r:  # fmt: skip
            assert r.status == 403  # from another site
            assert not any(h.lower().startswith("access-control-") for h in r.headers)


async def test_with_a_token_the_host_header_is_not_checked() -> None:
    config = ServeConfig(port=0, host="0.0.0.0", token=TOKEN, stall_after_s=1.0)
    async with serving(Camera(), config) as (url, _), aiohttp.ClientSession() as session:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert await _status(session, f"{url}/graph", {**bearer, "Host": "camera.example.com"}) == 200
        assert await _status(session, f"{url}/graph", {"Host": "camera.example.com"}) == 401


async def test_refusals_log_a_few_lines_and_then_say_how_many_were_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="edgepipe.serve")
    config = ServeConfig(port=0, host="0.0.0.0", token=TOKEN, stall_after_s=1.0)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with serving(Camera(), config) as (url, _), aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(
            *(_status(session, f"{url}/graph?token=guess{i}") for i in range(100))
        )
        assert set(statuses) == {401}
        unauthorized = [r for r in caplog.records if "unauthorized" in r.getMessage()]
        assert 1 <= len(unauthorized) <= 5
        caplog.clear()
        for _ in range(50):
            json_body = {**bearer, "Content-Type": "application/json"}
            async with session.post(f"{url}/offer", data=b"{", headers=json_body) as r:
                assert r.status == 400
        assert 1 <= len(caplog.records) <= 5
        assert all("bad request" in r.getMessage() for r in caplog.records)


async def test_a_request_the_http_parser_refuses_is_one_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    caplog.set_level(logging.WARNING, logger="edgepipe.serve")
    async with serving(Camera()) as (url, _), aiohttp.ClientSession() as session:
        assert await _status(session, f"{url}/whep/{'x' * 9000}") == 400  # over aiohttp's 8190 bytes
        assert await _status(session, f"{url}/graph", {"X-Big": "y" * 9000}) == 400
        assert await _status(session, f"{url}/graph") == 200
    refused = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage()[:28] for r in refused] == ["bad HTTP request from 127.0."] * 2
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_page_of_another_site_cannot_post_offers_to_a_loopback_server() -> None:
    # A "simple" cross-site request (text/plain, no preflight) reaches the server with a genuine
    # loopback Host; it held every viewer slot with forged offers (found by review).
    async with serving(Camera()) as (url, _), aiohttp.ClientSession() as session:
        offer = '{"sdp": "v=0", "type": "offer"}'
        plain = {"Content-Type": "text/plain", "Origin": "http://evil.example"}
        async with session.post(f"{url}/offer", data=offer, headers=plain) as r:
            assert r.status == 403
        async with session.post(f"{url}/offer", data=offer, headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415  # not JSON: refused whoever sends it
        port = url.rsplit(":", 1)[1]
        own = {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{port}"}
        async with session.post(f"{url}/offer", data=offer, headers=own) as r:
            assert r.status == 404  # past the guards: this pipeline streams nothing
        for origin in ("null", f"http://127.0.0.1:{int(port) + 1}", f"https://127.0.0.1:{port}.evil.example"):
            async with session.post(f"{url}/offer", data=offer, headers={**own, "Origin": origin}) as r:
                assert r.status == 403, origin
