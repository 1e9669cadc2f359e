from __future__ import annotations

import aiohttp
import aioice.ice
import pytest
from aiortc import RTCSessionDescription

from edgepipe.serve import ice
from edgepipe.serve.webrtc_stream import WebRTCStream
from tests.serve.peers import Peer
from tests.support.viewing import camera_pipeline, served


def test_no_stun_server_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ice.configuration().iceServers == []
    monkeypatch.setenv("EDGEPIPE_ICE_SERVERS", "stun:10.0.0.1:3478, turn:10.0.0.2")
    assert [s.urls for s in ice.ice_servers()] == ["stun:10.0.0.1:3478", "turn:10.0.0.2"]
    monkeypatch.setenv("EDGEPIPE_ICE_SERVERS", "http://example")
    with pytest.raises(ValueError, match="EDGEPIPE_ICE_SERVERS"):
        ice.ice_servers()


def test_host_addresses_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    ice.restrict_host_addresses()
    ice.restrict_host_addresses()  # idempotent
    assert aioice.ice.get_host_addresses(True, True) == ["127.0.0.1"]
    monkeypatch.setenv("EDGEPIPE_ICE_HOSTS", "127.0.0.1,::1")
    assert aioice.ice.get_host_addresses(True, False) == ["127.0.0.1"]
    assert aioice.ice.get_host_addresses(True, True) == ["127.0.0.1", "::1"]
    monkeypatch.setenv("EDGEPIPE_ICE_HOSTS", "localhost")
    with pytest.raises(ValueError, match="EDGEPIPE_ICE_HOSTS"):
        aioice.ice.get_host_addresses(True, True)
    monkeypatch.delenv("EDGEPIPE_ICE_HOSTS")
    assert "127.0.0.1" not in aioice.ice.get_host_addresses(True, True)  # aioice's own answer


def test_the_patch_is_made_once_and_again_once_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    ice.restrict_host_addresses()
    ours = aioice.ice.get_host_addresses
    ice.restrict_host_addresses()
    assert aioice.ice.get_host_addresses is ours, "made once, however often it is asked for"
    assert ice.restricted()
    aioices_own = ours.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(aioice.ice, "get_host_addresses", aioices_own)  # put back, as a test may
    assert not ice.restricted()
    ice.restrict_host_addresses()
    assert ice.restricted()
    assert aioice.ice.get_host_addresses.__wrapped__ is aioices_own  # type: ignore[attr-defined]


def test_a_server_on_loopback_gathers_loopback_and_an_explicit_choice_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EDGEPIPE_ICE_HOSTS")  # the suite's own setting (tests/conftest.py)
    with ice.serving_on("127.0.0.1"):
        assert aioice.ice.get_host_addresses(True, True) == ["127.0.0.1"]
        with ice.serving_on("0.0.0.0"):  # every interface, as aioice gathers them: no loopback
            assert "127.0.0.1" not in aioice.ice.get_host_addresses(True, True)
        assert aioice.ice.get_host_addresses(True, False) == ["127.0.0.1"]  # the scope is back
    with ice.serving_on("::1"):
        assert aioice.ice.get_host_addresses(True, True) == ["::1"]
        assert aioice.ice.get_host_addresses(True, False) == []
    with ice.serving_on("localhost"):
        assert aioice.ice.get_host_addresses(True, True) == ["127.0.0.1", "::1"]
    assert [ice.loopback_hosts(h) for h in ("127.0.0.2", "0.0.0.0", "::", "192.0.2.1", "camera.lan")] == [
        ("127.0.0.2",), None, None, None, None]  # fmt: skip
    monkeypatch.setenv("EDGEPIPE_ICE_HOSTS", "192.0.2.7")  # said by the operator: it wins
    with ice.serving_on("127.0.0.1"):
        assert aioice.ice.get_host_addresses(True, True) == ["192.0.2.7"]


def candidates(sdp: str) -> set[str]:
    """The addresses of an SDP's ICE candidates (``a=candidate:F C udp P ADDRESS PORT typ ...``)."""
    return {line.split()[4] for line in sdp.splitlines() if line.startswith("a=candidate:")}


@pytest.mark.usefixtures("libx264")
@pytest.mark.slow
async def test_a_server_bound_to_loopback_offers_loopback_candidates_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without EDGEPIPE_ICE_HOSTS, aioice would offer every other interface (a LAN address, an
    fd00:: one) and ICE could carry the media there. Nothing leaves loopback here: no STUN server
    (none configured, neither peer), and the viewer's offer is made while the suite's
    EDGEPIPE_ICE_HOSTS=127.0.0.1 holds, before the server answers without it."""
    peer = Peer()
    offer = await peer.offer()
    assert candidates(offer) == {"127.0.0.1"}
    monkeypatch.delenv("EDGEPIPE_ICE_HOSTS")
    async with served(camera_pipeline(WebRTCStream(), lambda frame: None)) as run:
        body = {"sdp": offer, "type": "offer"}
        async with aiohttp.ClientSession() as http, http.post(f"{run.url}/offer", json=body) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        assert candidates(answer["sdp"]) == {"127.0.0.1"}
        await peer.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        frames = await peer.frames(3)  # and the media flows over it
        await peer.pc.close()
    assert len(frames) == 3
