from __future__ import annotations

import aioice.ice
import pytest

from edgepipe.serve import ice


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
