from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from pathlib import Path

import pytest

from edgepipe.lm import LanguageModel, SamplingParams
from edgepipe.lm.worker import LMWorker

PARAMS = SamplingParams(max_new_tokens=16, ignore_eos=True)


async def test_async_pieces_equal_the_blocking_text(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["gqa"])
    pieces = [piece async for piece in worker.generate("Hello", PARAMS)]
    assert "".join(pieces) == LanguageModel(tiny_models["gqa"]).complete("Hello", PARAMS)
    assert worker.last_stats.new_tokens == 16
    assert worker.last_stats.stop_reason == "max_new_tokens"
    worker.close()


async def test_requests_take_turns_and_a_cancelled_one_stops_at_a_token(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["concat"], queue_size=2)
    long = SamplingParams(max_new_tokens=40, ignore_eos=True)

    async def first_pieces(count: int) -> list[str]:
        out = []
        async with aclosing(worker.generate("abc", long)) as pieces:
            async for piece in pieces:
                out.append(piece)
                if len(out) == count:
                    break  # the caller stops: the request ends here
        return out

    results = await asyncio.gather(first_pieces(3), worker.complete("abc", long), first_pieces(5))
    assert [len(results[0]), len(results[2])] == [3, 5]
    assert worker.requests == 3
    assert worker.last_stats.stop_reason == "cancelled"  # the last one in line stopped early
    assert 5 <= worker.last_stats.new_tokens < 40  # a piece may take more than one token (UTF-8)
    worker.close()


async def test_the_event_loop_runs_between_tokens(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["gqa"])
    await worker.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as group:
        task = group.create_task(ticker())
        text = await worker.complete("tick", SamplingParams(max_new_tokens=30, ignore_eos=True))
        task.cancel()
    assert text
    assert ticks >= 30  # at least one loop turn per token
    worker.close()


async def test_a_closed_worker_says_so(tiny_models: dict[str, Path]) -> None:
    from edgepipe.lm import LMError

    worker = LMWorker(tiny_models["gqa"])
    assert await worker.complete("hi", PARAMS)
    worker.close()
    with pytest.raises(LMError, match="the worker is closed"):
        await worker.complete("hi", PARAMS)


async def test_stop_strings_apply_to_token_id_prompts(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["gqa"])
    lm_text = LanguageModel(tiny_models["gqa"]).complete("Hello", PARAMS)
    stop = lm_text[4:6]
    ids = LanguageModel(tiny_models["gqa"]).encode("Hello")
    cut = await worker.complete(ids, SamplingParams(max_new_tokens=16, ignore_eos=True, stop_strings=(stop,)))
    assert cut == lm_text[: lm_text.index(stop)]
    worker.close()


async def test_max_tokens_per_s_paces_decoding_on_the_loop(tiny_models: dict[str, Path]) -> None:
    params = SamplingParams(max_new_tokens=9, ignore_eos=True)
    fast = LMWorker(tiny_models["gqa"])
    t0 = time.perf_counter()
    await fast.complete([65, 66], params)
    fast_s = time.perf_counter() - t0
    paced = LMWorker(tiny_models["gqa"], max_tokens_per_s=40)
    await paced.start()
    t0 = time.perf_counter()
    await paced.complete([65, 66], params)
    paced_s = time.perf_counter() - t0
    stats = paced.last_stats
    assert stats.new_tokens == 9
    assert paced_s >= 8 / 40  # 9 tokens: 8 waits of a fortieth of a second at least
    assert paced_s > fast_s
    assert stats.paced_ms > 100
    assert stats.tpot_ms < 20  # model time only: the waits are not in it
    assert stats.to_dict()["paced_ms"] == round(stats.paced_ms, 3)
    with pytest.raises(ValueError, match="max_tokens_per_s"):
        LMWorker(tiny_models["gqa"], max_tokens_per_s=0)
    fast.close()
    paced.close()
