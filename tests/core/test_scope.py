"""The run scope: a slot gives the run's value inside a run (its tasks and its pools' threads),
the process's outside it."""

from __future__ import annotations

import asyncio
import threading

from edgepipe.core.executor import DaemonThreadPool, Resources
from edgepipe.core.scope import RunScope, Slot, context_of, current_scope, entered

PROCESS = object()
WIDGET: Slot[object] = Slot("widget", lambda: PROCESS)


def test_outside_a_run_a_slot_is_the_process_s_and_inside_the_run_s() -> None:
    own = object()
    scope = RunScope("a")
    assert WIDGET.get() is PROCESS
    assert current_scope() is None
    with entered(scope):
        assert WIDGET.get() is PROCESS, "a run without its own value uses the process's"
        scope.put(WIDGET, own)
        assert WIDGET.get() is own
        assert current_scope() is scope
    assert WIDGET.get() is PROCESS


def test_two_runs_in_one_loop_each_see_their_own() -> None:
    seen: dict[str, object] = {}

    async def one_run(name: str) -> None:
        scope = RunScope(name)
        scope.put(WIDGET, name)
        with entered(scope):
            await asyncio.sleep(0.01)  # the other run enters its scope meanwhile
            child = asyncio.create_task(asyncio.sleep(0, result=WIDGET.get()))  # inherits it
            seen[name] = (WIDGET.get(), await child)

    async def both() -> None:
        await asyncio.gather(one_run("a"), one_run("b"))

    asyncio.run(both())
    assert seen == {"a": ("a", "a"), "b": ("b", "b")}


def test_a_pool_s_threads_work_for_the_run_that_uses_it_or_the_one_it_was_made_in() -> None:
    scope = RunScope("a")
    scope.put(WIDGET, "a")
    with entered(scope):
        made_inside = DaemonThreadPool(1, "inside", spare_workers=0)
    made_outside = DaemonThreadPool(1, "outside", spare_workers=0)
    run_pools = Resources({"cpu": 1}, context=context_of(scope))
    try:
        # A node's code makes its pool before the run (an LM worker's thread, in its constructor):
        # the run that starts the pool's thread is the one it works for.
        with entered(scope):
            from_outside = made_outside.submit(WIDGET.get).result(5)
        assert from_outside == "a"
        assert made_inside.submit(WIDGET.get).result(5) == "a"  # started outside any run: its maker's
        assert run_pools.executor("cpu").submit(WIDGET.get).result(5) == "a"
        # every thread of the pool, not only the first (each runs in a copy of the context)
        barrier = threading.Barrier(2)
        wide = DaemonThreadPool(2, "wide", spare_workers=0, context=context_of(scope))
        futures = [wide.submit(lambda: (barrier.wait(5), WIDGET.get())[1]) for _ in range(2)]
        assert [f.result(5) for f in futures] == ["a", "a"]
        wide.shutdown()
    finally:
        made_inside.shutdown()
        made_outside.shutdown()
        run_pools.shutdown()


def test_a_slot_made_per_run_gives_each_run_its_own_made_once() -> None:
    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    counter: Slot[object] = Slot("counter", lambda: PROCESS, per_run=make)
    assert counter.get() is PROCESS, "outside a run: the process's, nothing made"
    first, second = RunScope("a"), RunScope("b")
    seen: list[object] = []
    contexts = [context_of(first) for _ in range(8)]  # one a thread: a context is entered once
    threads = [threading.Thread(target=c.run, args=(lambda: seen.append(counter.get()),)) for c in contexts]
    for thread in threads:  # the run's threads, asking at once
        thread.start()
    for thread in threads:
        thread.join()
    with entered(first):
        mine = counter.get()
    assert seen == [mine] * 8
    assert made == [mine], "one made for the run"
    with entered(second):
        assert counter.get() is not mine
    assert made == [mine, second.get(counter)]
    assert counter.get() is PROCESS
