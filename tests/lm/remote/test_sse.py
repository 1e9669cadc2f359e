import pytest

from edgepipe.lm.remote.sse import SseError, SseEvent, SseParser


def test_events_end_at_a_blank_line_whatever_the_line_endings() -> None:
    parser = SseParser()
    stream = b'data: {"a": 1}\n\ndata: two\r\n\r\ndata: three\r\rdata: [DONE]\n\n'
    assert [e.data for e in parser.feed(stream)] == ['{"a": 1}', "two", "three", "[DONE]"]


def test_an_event_split_anywhere_across_reads_is_whole_once_its_blank_line_comes() -> None:
    stream = 'data: {"text": "café ☕"}\r\n\r\n'.encode()
    for cut in range(1, len(stream)):
        parser = SseParser()
        events = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        assert events == [SseEvent('{"text": "café ☕"}')], cut


def test_comments_are_pings_and_several_data_lines_join() -> None:
    parser = SseParser()
    events = parser.feed(b":\n\n: keep-alive\n\nevent: error\ndata: line one\ndata:line two\nid: 7\n\n")
    assert events == [SseEvent("line one\nline two", "error")]
    assert parser.pings == 2


def test_a_stream_that_ends_mid_event_is_told_apart_from_one_that_ended_cleanly() -> None:
    clean = SseParser()
    clean.feed(b"data: x\n\n")
    assert clean.close() is False
    cut = SseParser()
    assert cut.feed(b'data: {"choices": [') == []
    assert cut.close() is True


def test_a_line_without_end_past_the_bound_and_bytes_not_utf8_are_errors() -> None:
    with pytest.raises(SseError, match="without an end"):
        SseParser(max_line=64).feed(b"data: " + b"x" * 100)
    with pytest.raises(SseError, match="not UTF-8"):
        SseParser().feed(b"data: \xff\xfe\n\n")
