import pytest

from edgepipe.lm.remote.chunks import ChunkError, read_chunk
from edgepipe.lm.remote.sse import SseEvent


def chunk(data: str, event: str = "message"):  # type: ignore[no-untyped-def]
    return read_chunk(SseEvent(data, event))


def test_text_a_role_only_chunk_and_the_end() -> None:
    assert chunk('{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}').text == ""
    assert chunk('{"choices":[{"index":0,"delta":{"content":"Two "}}]}').text == "Two "
    last = chunk('{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}')
    assert (last.text, last.finish_reason) == ("", "length")
    assert chunk("[DONE]").done


def test_usage_only_chunks_with_empty_choices_and_llama_servers_timings() -> None:
    usage = chunk('{"choices":[],"usage":{"completion_tokens":5,"prompt_tokens":9,"total_tokens":14},'
                  '"timings":{"prompt_n":9,"prompt_ms":3.5,"predicted_n":5,"predicted_ms":20.0}}')  # fmt: skip
    assert usage.text == ""
    assert usage.usage == {"completion_tokens": 5, "prompt_tokens": 9, "total_tokens": 14}
    assert usage.timings == {"prompt_n": 9, "prompt_ms": 3.5, "predicted_n": 5, "predicted_ms": 20.0}
    assert chunk('{"usage":{"completion_tokens":1}}').usage == {"completion_tokens": 1}  # no choices key


def test_an_error_after_the_200_is_a_server_error_and_junk_is_not_a_chunk() -> None:
    with pytest.raises(ChunkError, match="out of memory") as raised:
        chunk('{"error":{"code":500,"message":"out of memory","type":"server_error"}}')
    assert raised.value.server_error
    with pytest.raises(ChunkError) as raised:
        chunk("overloaded", event="error")
    assert raised.value.server_error
    for junk in ("<html>", "[1, 2]", '{"id": 3}'):
        with pytest.raises(ChunkError) as raised:
            chunk(junk)
        assert not raised.value.server_error
