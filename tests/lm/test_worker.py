from __future__ import annotations

import asyncio
import gc
import itertools
import time
import weakref
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from edgepipe.lm import LanguageModel, LMError, SamplingParams
from edgepipe.lm.worker import LMWorker
from edgepipe.planning import memory
from edgepipe.planning.memory import MemoryPlan
from edgepipe.sched.gate import gate

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


@pytest.mark.solo  # a rate in steps per second
async def test_max_tokens_per_s_paces_every_model_step_on_the_loop(tiny_models: dict[str, Path]) -> None:
    rate = 20.0
    worker = LMWorker(tiny_models["gqa"], max_tokens_per_s=rate, speculate=0)  # a token a step
    await worker.start()
    assert worker.lm is not None
    runner = worker.lm.runner
    step = runner.step
    steps: list[float] = []

    def timed_step(slots: Any, tokens: Any) -> Any:
        steps.append(time.perf_counter())
        return step(slots, tokens)

    runner.step = timed_step  # type: ignore[method-assign]
    # The byte model's noise: many of its tokens are parts of characters, so steps outnumber
    # the text pieces; pacing must hold each step, not each piece.
    await worker.complete([65, 66], SamplingParams(max_new_tokens=9, ignore_eos=True))
    t_done = time.perf_counter()
    stats = worker.last_stats
    assert stats.new_tokens == 9
    assert len(steps) == 9  # the prompt, then a step per token after the first
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert min(gaps) >= 0.8 / rate, gaps
    assert t_done - steps[-1] < 1 / rate  # no wait after the last token
    assert 0.9 * 7 / rate <= stats.paced_ms / 1000 <= sum(gaps) + 1 / rate
    assert stats.tpot_ms < 10  # model time only: the waits are not in it
    assert stats.to_dict()["paced_ms"] == round(stats.paced_ms, 3)
    with pytest.raises(ValueError, match="max_tokens_per_s"):
        LMWorker(tiny_models["gqa"], max_tokens_per_s=0)
    worker.close()


async def test_every_token_pieces_give_one_item_per_step_and_the_same_text(
    tiny_models: dict[str, Path],
) -> None:
    lm = LanguageModel(tiny_models["gqa"])
    params = SamplingParams(max_new_tokens=20, ignore_eos=True, stop_strings=("zz",))
    plain = list(lm.pieces([65, 66], params))
    stepped = list(lm.pieces([65, 66], params, every_token=True))
    assert "".join(stepped) == "".join(plain)
    assert len(stepped) >= lm.stats.new_tokens - 1  # held-back text comes out with the last
    assert "" in stepped


@pytest.mark.parametrize("end", ["stop_token", "max_seq_len"])
async def test_no_pacing_wait_after_the_last_token(tiny_models: dict[str, Path], end: str) -> None:
    rate = 10.0
    worker = LMWorker(tiny_models["gqa"], max_tokens_per_s=rate)
    await worker.start()
    assert worker.lm is not None
    if end == "stop_token":  # the third token the model writes ends the request
        free = list(worker.lm.tokens([65, 66], SamplingParams(max_new_tokens=3, ignore_eos=True)))
        prompt, params = [65, 66], SamplingParams(max_new_tokens=20, ignore_eos=True, stop_tokens=(free[2],))
    else:  # two tokens of room left in the 64-position cache
        prompt, params = [65] * 62, SamplingParams(max_new_tokens=20, ignore_eos=True)
    t0 = time.perf_counter()
    await worker.complete(prompt, params, overflow="stop")
    took = time.perf_counter() - t0
    stats = worker.last_stats
    assert stats.stop_reason == end
    steps = stats.new_tokens - 1
    assert steps / rate * 0.9 <= took < (steps + 0.8) / rate  # the waits between steps, none after


async def test_cancel_ends_a_step_waiting_for_its_pace_at_the_cpu_gate(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["gqa"])
    await worker.start()
    [ticket] = worker.tickets()
    ticket.duty = 1e-5  # each step is followed by a wait of 10^5 times its length (the prompt's: seconds)
    asyncio.get_running_loop().call_later(0.3, worker.cancel)
    t0 = time.perf_counter()
    async with asyncio.timeout(5):
        await worker.complete([65, 66], SamplingParams(max_new_tokens=40, ignore_eos=True))
    took = time.perf_counter() - t0
    stats = worker.last_stats
    assert stats.stop_reason == "cancelled"
    assert took < 0.6  # the wait for the pace ended with the cancel
    assert (stats.new_tokens, stats.token_ms, ticket.calls) == (1, [], 1)  # the prompt ran, no step after it
    worker.cancel()  # nothing under way: nothing happens
    gate().unpace()  # (else the next prompt would wait for the pace the first one left)
    assert len(await worker.complete([65, 66], PARAMS)) > 0  # the next request is not cancelled
    assert worker.last_stats.stop_reason == "max_new_tokens"
    worker.close()


async def test_cancel_ends_the_wait_for_max_tokens_per_s(tiny_models: dict[str, Path]) -> None:
    worker = LMWorker(tiny_models["gqa"], max_tokens_per_s=0.5)  # a token every 2 s
    await worker.start()
    asyncio.get_running_loop().call_later(0.3, worker.cancel)
    t0 = time.perf_counter()
    async with asyncio.timeout(5):
        await worker.complete([65, 66], SamplingParams(max_new_tokens=40, ignore_eos=True))
    assert time.perf_counter() - t0 < 0.6
    stats = worker.last_stats
    assert (stats.stop_reason, stats.new_tokens) == ("cancelled", 1)
    assert 0.1 < stats.paced_ms / 1000 < 0.6
    worker.close()


async def test_cancel_while_the_model_loads_ends_the_request_before_its_first_step(
    tiny_models: dict[str, Path],
) -> None:
    worker = LMWorker(tiny_models["gqa"])
    request = asyncio.ensure_future(worker.complete([65, 66], PARAMS))
    await asyncio.sleep(0)  # under way: loading the model on the worker's thread
    assert worker.lm is None
    worker.cancel()
    assert await request == ""
    assert (worker.last_stats.stop_reason, worker.last_stats.new_tokens) == ("cancelled", 0)
    worker.close()


async def test_a_refused_request_leaves_its_own_stats(tiny_models: dict[str, Path]) -> None:
    from edgepipe.lm import ContextOverflow

    worker = LMWorker(tiny_models["gqa"])
    await worker.complete([65, 66], SamplingParams(max_new_tokens=5, ignore_eos=True))
    assert worker.last_stats.new_tokens == 5
    with pytest.raises(ContextOverflow):
        await worker.complete([65] * 60, SamplingParams(max_new_tokens=10))
    assert (worker.last_stats.prompt_tokens, worker.last_stats.new_tokens) == (60, 0)
    worker.close()


@pytest.fixture
def plan(monkeypatch: pytest.MonkeyPatch) -> MemoryPlan:
    """A memory plan of the test's own: what the worker holds, and nothing else."""
    own = MemoryPlan(limit_bytes=1 << 34)
    monkeypatch.setattr(memory, "_PLAN", own)
    return own


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.01)


def held(worker: LMWorker) -> list[weakref.ref[Any]]:
    """The model, its session and its KV cache, weakly: dead once let go."""
    assert worker.lm is not None
    runner = worker.lm.runner
    return [weakref.ref(worker.lm), weakref.ref(runner.session), weakref.ref(runner.cache)]


async def test_close_frees_the_model_and_start_loads_it_again(
    tiny_models: dict[str, Path], plan: MemoryPlan
) -> None:
    worker = LMWorker(tiny_models["gqa"])
    text = await worker.complete("hi", PARAMS)
    assert sorted(r.what.split(" (")[0] for r in plan.entries()) == ["KV cache", "model weights"]
    refs = held(worker)
    worker.close()
    await until(lambda: not plan.entries())  # freed on the worker's thread
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    with pytest.raises(LMError, match="closed"):
        await worker.complete("hi", PARAMS)
    await worker.start()  # a restart: loaded again, on a thread of its own
    assert await worker.complete("hi", PARAMS) == text
    assert len(plan.entries()) == 2
    worker.close()
    await until(lambda: not plan.entries())


async def test_closed_mid_request_the_model_goes_once_the_step_ends(
    tiny_models: dict[str, Path], plan: MemoryPlan
) -> None:
    worker = LMWorker(tiny_models["concat"], max_tokens_per_s=20)
    pieces: list[str] = []

    async def ask() -> None:
        async for piece in worker.generate("abc", SamplingParams(max_new_tokens=60, ignore_eos=True)):
            pieces.append(piece)

    async with asyncio.TaskGroup() as group:
        request = group.create_task(ask())
        await until(lambda: len(pieces) >= 2)
        refs = held(worker)
        request.cancel()  # the caller is cancelled mid-request, then its node stops
        worker.close()
    await until(lambda: not plan.entries())
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert worker.last_stats.stop_reason == "cancelled"


async def test_requests_on_slots_interleave_their_tokens_on_one_model(tiny_models: dict[str, Path]) -> None:
    prompts = ["north gate", "loading bay", "car park"]
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    alone = [LanguageModel(tiny_models["gqa"]).complete(p, params) for p in prompts]
    worker = LMWorker(tiny_models["gqa"], slots=3)
    order: list[int] = []

    async def ask(i: int) -> str:
        text = ""
        async for piece in worker.generate(prompts[i], params):
            order.append(i)
            text += piece
        return text

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(ask(i)) for i in range(3)]
    assert [t.result() for t in tasks] == alone
    assert order.index(2) < len(order) - order[::-1].index(0) - 1  # the last began before the first ended
    assert worker.lm is not None
    assert worker.lm.runner.slots == 3
    await worker.aclose()
