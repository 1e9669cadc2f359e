"""1 000 malformed requests at a served pipeline while a real aiortc viewer watches it: fuzzed SDP
(JSON /offer and WHEP), broken JSON, wrong content types, oversize bodies, bad viewer ids, bad
Host headers, and garbage on the data channels. Seeded: the same cases every run."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgpack
import pytest

from edgepipe import Pipeline
from edgepipe.media.sources.video import VideoSource
from edgepipe.runner import RunConfig, run_async
from edgepipe.serve import HttpServer, ServeConfig
from edgepipe.serve.webrtc_stream import WebRTCStream

from .peers import Peer
from .watcher import Watcher

pytestmark = [pytest.mark.usefixtures("libx264"), pytest.mark.slow, pytest.mark.timeout(240)]

REQUESTS = 1000
Case = Callable[["Fuzzer"], Any]


@asynccontextmanager
async def served(stream: WebRTCStream) -> AsyncIterator[tuple[str, asyncio.Task[Any]]]:
    p = Pipeline("fuzzed")
    camera = p.source("camera", VideoSource("synthetic://320x240@30"))
    p.sink("view", stream.video("camera"), inputs=camera, policy="latest", queue_size=1)
    server = HttpServer(ServeConfig(port=0))
    async with asyncio.TaskGroup() as tg:
        run = tg.create_task(run_async(p, RunConfig(governed=False, watchers=[server], drain_timeout_s=1.0)))
        await asyncio.wait_for(server.ready.wait(), 10)
        assert server.url is not None
        try:
            yield f"http://127.0.0.1:{server.url.rsplit(':', 1)[1]}", run
        finally:
            run.cancel()


class Fuzzer:
    """Makes the cases, from one seed and one real offer to mutate."""

    def __init__(self, seed: int, sdp: str) -> None:
        self.rng = random.Random(seed)
        self.sdp = sdp
        self.lines = sdp.split("\r\n")

    def junk(self, n: int) -> str:
        alphabet = "abcxyz019=:;/ -\t\r\n\x00\x7f\u00e9\u2028\ud800{}[]\"'\\%$"
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def text(self, n: int) -> str:
        """Junk that encodes to UTF-8 (what aiortc and msgpack can send)."""
        return self.junk(n).replace("\ud800", "?")

    def mutated_sdp(self) -> str:
        rng, lines = self.rng, list(self.lines)
        for _ in range(rng.randint(3, 8)):
            op = rng.randrange(8)
            i = rng.randrange(len(lines))
            if op == 0:
                return "\r\n".join(lines)[: rng.randrange(len(self.sdp))]
            if op == 1:
                del lines[i]
            elif op == 2:
                lines.insert(i, lines[rng.randrange(len(lines))])
            elif op == 3:
                line = lines[i]
                j = rng.randrange(len(line) + 1)
                lines[i] = line[:j] + self.junk(rng.randint(1, 8)) + line[j + rng.randint(0, 8) :]
            elif op == 4:
                lines.insert(i, rng.choice("amcbtkz") + "=" + self.junk(rng.randint(0, 40)))
            elif op == 5:
                lines[i] = lines[i].replace(" ", " " + str(rng.choice([-1, 0, 2**31, 2**64, 99999])) + " ", 1)
            elif op == 6:
                lines[i] = rng.choice(["H264", "VP8", "sha-256", "UDP", "97", "actpass"]).join(
                    lines[i].split(rng.choice(["H264", "sha-256", "UDP", "9", "a", " "]))
                )
            else:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
        return "\r\n".join(lines)

    def offer_body(self) -> tuple[str, dict[str, str], bytes]:
        rng = self.rng
        sdp: Any = self.mutated_sdp()
        kind: Any = "offer"
        twist = rng.randrange(10)
        if twist == 0:
            sdp = rng.choice([None, 1, 2.5, True, [sdp], {"sdp": sdp}, ""])
        elif twist == 1:
            kind = rng.choice(["answer", "pranswer", "rollback", "", None, 7, ["offer"], "x" * 70_000])
        elif twist == 2:
            sdp = sdp + "a=x:" + "y" * rng.randint(60_000, 200_000) + "\r\n"  # huge, under 256 KiB
        body = json.dumps({"sdp": sdp, "type": kind}).encode()
        if twist == 3:  # non-UTF-8 bytes inside the JSON string
            body = body.replace(b"v=0", b"v=0\xff\xfe\xc3", 1)
        return "/offer", {"Content-Type": "application/json"}, body

    def whep_body(self) -> tuple[str, dict[str, str], bytes]:
        body = self.mutated_sdp().encode("utf-8", "surrogatepass")
        if self.rng.random() < 0.2:
            body = body[:100] + bytes(self.rng.randrange(256) for _ in range(50)) + body[100:]
        return "/whep", {"Content-Type": "application/sdp"}, body

    def bad_json(self) -> tuple[str, dict[str, str], bytes]:
        rng = self.rng
        whole = json.dumps({"sdp": self.sdp, "type": "offer"}).encode()
        body = rng.choice([
            whole[: rng.randrange(len(whole))],
            b"[" * rng.randint(1_000, 200_000),
            b'{"sdp": ' * rng.randint(1, 50_000),
            bytes(rng.randrange(256) for _ in range(rng.randint(0, 500))),
            b"", b"null", b"NaN", b"1e999999", b'"v=0"', b"\xef\xbb\xbf{}", b"{" + b" " * 100_000,
        ])  # fmt: skip
        return "/offer", {"Content-Type": "application/json"}, body

    def wrong_type(self) -> tuple[str, dict[str, str], bytes]:
        path = self.rng.choice(["/offer", "/whep"])
        ctype = self.rng.choice(["text/plain", "application/json", "application/x-www-form-urlencoded",
                                 "multipart/form-data; boundary=x", "application/sdp; charset=latin-9",
                                 "application/octet-stream", ""])  # fmt: skip
        if path == "/whep" and ctype.startswith("application/sdp"):
            ctype = "application/sdp; charset=no-such-charset"
        body = self.sdp.encode() if self.rng.random() < 0.5 else b"sdp=" + self.sdp.encode()
        return path, {"Content-Type": ctype}, body

    def oversize(self) -> tuple[str, dict[str, str], bytes]:
        path, ctype = self.rng.choice([("/offer", "application/json"), ("/whep", "application/sdp")])
        return path, {"Content-Type": ctype}, b"v=0\r\n" + b"a" * (256 * 1024 + self.rng.randint(1, 100_000))

    def bad_id(self) -> str:
        rng = self.rng
        return rng.choice([
            "x" + str(rng.randrange(10**9)), "%00", "%2e%2e%2fetc", "..%2f..%2f", "V1", "v-1", "v1x",
            "%ff%fe", "x" * rng.randint(100, 9000), "%0Aforged log line", "vv" + self.text(3).encode().hex(),
        ])  # fmt: skip

    def channel_message(self) -> bytes | str:
        rng = self.rng
        op = rng.randrange(7)
        if op == 0:
            return bytes(rng.randrange(256) for _ in range(rng.randint(0, 2000)))
        if op == 1:
            return msgpack.packb(self.value(3), use_bin_type=True)
        if op == 2:
            kind = rng.choice(["keyframe", "detections", "sync", "", None, 1, "KEYFRAME", "x" * 300])
            source = rng.choice([None, "camera", "nope", 5, [], "x" * 5000])
            return msgpack.packb({"v": rng.choice([1, 2, 0, "1", None]), "kind": kind, "source": source})
        if op == 3:
            return bytes(rng.randrange(256) for _ in range(rng.randint(5_000, 60_000)))
        if op == 4:  # text (aiortc sends str as UTF-8: no lone surrogates)
            return self.text(rng.randint(0, 300))
        if op == 5:  # truncated msgpack, and msgpack that claims more than it holds
            packed = msgpack.packb({"v": 1, "kind": "keyframe", "pad": self.text(50)})
            return packed[: rng.randrange(len(packed))] + rng.choice([b"", b"\xdd\xff\xff\xff\xff", b"\xc1"])
        return b"\x91" * rng.randint(100, 3000) + b"\xc0"  # nested deeper than msgpack allows

    def value(self, depth: int) -> Any:
        rng = self.rng
        if depth == 0 or rng.random() < 0.3:
            return rng.choice([None, True, -(2**63), 2**64 - 1, 1.5, "", b"\x00\xff", 7, self.text(10)])
        if rng.random() < 0.5:
            return [self.value(depth - 1) for _ in range(rng.randint(0, 5))]
        return {str(self.value(0)): self.value(depth - 1) for _ in range(rng.randint(0, 5))}


async def test_a_thousand_malformed_requests_leave_the_server_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    stream = WebRTCStream()
    viewers = stream.viewers
    async with served(stream) as (url, run), aiohttp.ClientSession() as http, asyncio.TaskGroup() as tg:
        watcher = Watcher()
        watcher_id = await watcher.connect(http, url)
        reader = tg.create_task(watcher.read())
        await watcher.frames_after(0, 10)
        results_channel = await asyncio.wait_for(watcher.results_channel, 10)
        # Mutations of another peer's offer: the watcher's own, still valid with its ICE
        # credentials, would be a replay aimed at it (a server peer doing ICE with it).
        template = Peer()
        fuzz = Fuzzer(20251213, await template.offer())
        await template.pc.close()
        rng = fuzz.rng
        statuses: list[tuple[str, int]] = []
        accepted = 0  # mutated offers that are still valid: answered, then sent away
        sent_on_channels = 0
        caplog.clear()

        async def request(method: str, path: str, headers: dict[str, str], body: bytes | None) -> None:
            nonlocal accepted
            skip = ["Content-Type"] if headers.get("Content-Type") == "" else []
            headers = {k: v for k, v in headers.items() if v}
            async with http.request(method, url + path, headers=headers, data=body,
                                    skip_auto_headers=skip) as r:  # fmt: skip
                text = await r.text(errors="replace")
                statuses.append((f"{method} {path[:20]}", r.status))
                if r.status in (200, 201) and method == "POST":  # a mutation that is still an offer
                    accepted += 1
                    viewer = json.loads(text)["viewer"] if path == "/offer" else r.headers["Location"][6:]
                    async with http.delete(f"{url}/whep/{viewer}") as gone:
                        assert gone.status == 200

        t_start = time.monotonic()
        kinds = ["offer"] * 250 + ["whep"] * 150 + ["json"] * 150 + ["type"] * 80 + ["size"] * 40
        kinds += ["id"] * 100 + ["host"] * 30 + ["channel"] * 200
        assert len(kinds) == REQUESTS
        rng.shuffle(kinds)
        for kind in kinds:
            if kind == "channel":
                channel = results_channel if rng.random() < 0.5 else watcher.own
                channel.send(fuzz.channel_message())
                sent_on_channels += 1
                if sent_on_channels % 20 == 0:
                    await asyncio.sleep(0.05)  # let SCTP carry them
                continue
            if kind == "id":
                await request(
                    rng.choice(["DELETE", "DELETE", "GET", "POST"]), f"/whep/{fuzz.bad_id()}", {}, None
                )
                continue
            if kind == "host":
                host = rng.choice(["evil.example", "127.0.0.1.nip.io", "localhost.attacker.com:80", "[::2]",
                                   "0.0.0.0", "", "127.0.0.1:80:80", "localhost:x"])  # fmt: skip
                await request("GET", rng.choice(["/metrics", "/graph", "/health"]), {"Host": host}, None)
                continue
            make = {"offer": fuzz.offer_body, "whep": fuzz.whep_body, "json": fuzz.bad_json,
                    "type": fuzz.wrong_type, "size": fuzz.oversize}[kind]  # fmt: skip
            path, headers, body = make()
            await request("POST", path, headers, body)
        t_fuzzed = time.monotonic()

        # Every data-channel message reached the server and was read.
        server_side = viewers.viewers[watcher_id]
        for _ in range(200):
            if server_side.inbox.received >= sent_on_channels:
                break
            await asyncio.sleep(0.05)
        assert server_side.inbox.received == sent_on_channels == 200
        assert server_side.inbox.dropped >= 150  # garbage; the rest were keyframe requests

        # Video kept flowing during the fuzz, and still flows after it.
        during = [pts for at, pts in watcher.received if t_start < at <= t_fuzzed]
        assert len(during) >= 10
        after = await watcher.frames_after(t_fuzzed, 30)
        assert all(b > a for a, b in itertools.pairwise(after)), "timestamps advance"
        assert after[0] > during[-1]
        assert not run.done(), "the pipeline still runs"

        # A new viewer connects, receives video and leaves; no slot was leaked.
        late = Watcher()
        late_id = await late.connect(http, url)
        late_reader = tg.create_task(late.read())
        await late.frames_after(0, 5)
        assert len(viewers.viewers) == 2
        async with http.delete(f"{url}/whep/{late_id}") as r:
            assert r.status == 200
        late_reader.cancel()
        await late.pc.close()
        assert list(viewers.viewers) == [watcher_id]
        assert viewers.encoders["camera"].subscribers == 1
        async with http.get(f"{url}/health") as r:
            assert r.status == 200
        reader.cancel()
        await watcher.pc.close()

    codes = {code for _, code in statuses}
    bad = [s for s in statuses if not 400 <= s[1] < 500 and s[1] not in (200, 201)]
    assert not bad, bad[:10]
    assert len(statuses) == REQUESTS - 200
    assert accepted < 50, "the cases are malformed, not valid offers"
    assert {400, 403, 404, 405, 413, 415} <= codes
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) <= REQUESTS - accepted, "at most one line per bad request"
    assert not [r for r in records if r.exc_info], "no tracebacks"
    assert "Traceback" not in caplog.text
    assert not [r for r in records if r.levelno >= logging.ERROR], [r.getMessage() for r in records][:5]
