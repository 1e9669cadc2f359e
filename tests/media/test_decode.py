from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgepipe.media.decode import StreamDecoder
from edgepipe.media.errors import DecoderError, SourceError
from edgepipe.media.hw import DecoderChoice
from edgepipe.media.url import parse


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections and never says a word; its port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.mark.parametrize("scheme", ["rtsp", "http"])
def test_an_open_that_timed_out_says_so_and_what_to_check(silent_server: int, scheme: str) -> None:
    url = f"{scheme}://viewer:secret@127.0.0.1:{silent_server}/cam"
    with pytest.raises(SourceError) as caught:
        StreamDecoder(parse(url), timeout_s=0.5).open()
    assert str(caught.value) == (
        f"{scheme}://viewer:***@127.0.0.1:{silent_server}/cam: no answer within 0.5 s (the open timed "
        f"out); check that the server at 127.0.0.1:{silent_server} is up and serves this URL, or give "
        "it longer with timeout_s"
    )
    assert caught.value.retryable


def test_a_refused_connection_is_not_called_a_timeout() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(SourceError, match="cannot open: Connection refused"):
            StreamDecoder(parse(f"rtsp://127.0.0.1:{port}/cam"), timeout_s=2.0).open()


def test_switch_gives_the_open_input_another_decoder(clip: Path) -> None:
    decoder = StreamDecoder(parse(str(clip)), choice=DecoderChoice("h264", decoder="h264"))
    decoder.open()
    try:
        packets = list(decoder.packets())
        second_gop = [i for i, p in enumerate(packets) if p.is_keyframe][1]
        assert sum(len(decoder.decode(p)) for p in packets[:second_gop]) > 0  # the named decoder
        decoder.switch(DecoderChoice("h264"))  # at a keyframe, as a failover does
        assert decoder.choice == DecoderChoice("h264")
        frames = [f for p in packets[second_gop:] for f in decoder.decode(p)] + decoder.decode(None)
        assert len(frames) == len(packets) - second_gop  # the rest of the clip, by the new decoder
        with pytest.raises(DecoderError, match="no_such_decoder cannot decode here"):
            decoder.switch(DecoderChoice("h264", decoder="no_such_decoder"))
    finally:
        decoder.close()
