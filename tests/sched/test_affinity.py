"""Heavy calls on their own cores: the plan, and real threads moved (where there are 2 cores)."""

from __future__ import annotations

import contextvars
import os
import threading

import pytest

from edgepipe.core.scope import RunScope, entered
from edgepipe.sched import affinity
from edgepipe.sched.affinity import CoreSplit, plan

CORES = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def test_the_last_cores_take_the_heavy_calls_and_the_rest_keep_one_at_least() -> None:
    assert plan(1, frozenset({0, 1})) == CoreSplit(heavy=frozenset({1}), light=frozenset({0}))
    assert plan(5, frozenset(range(8))) == CoreSplit(heavy=frozenset(range(3, 8)), light=frozenset(range(3)))
    assert plan(None, frozenset({0, 1})) is None, "ungoverned: nothing is pinned"
    assert plan(1, frozenset({3})) is None, "one core: nothing to split"
    assert plan(2, frozenset({0, 1})) is None, "no core would be left for decode"


def test_it_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(affinity.ENV, "0")
    assert plan(1, frozenset({0, 1})) is None


@pytest.mark.skipif(len(CORES) < 2, reason="needs two cores")
def test_threads_are_moved_to_their_side_and_a_session_scope_is_undone() -> None:
    split = plan(1, CORES)
    assert split is not None
    seen: dict[str, frozenset[int]] = {}

    def work() -> None:
        affinity.pin_heavy()
        seen["heavy"] = frozenset(os.sched_getaffinity(0))
        affinity.pin_light()
        seen["light"] = frozenset(os.sched_getaffinity(0))
        affinity.unpin(CORES)
        with affinity.heavy_scope():
            seen["scope"] = frozenset(os.sched_getaffinity(0))
        seen["after"] = frozenset(os.sched_getaffinity(0))

    scope = RunScope("t")
    scope.put(affinity.SPLIT, split)
    with entered(scope):  # the thread works for the run: started in its context
        thread = threading.Thread(target=contextvars.copy_context().run, args=(work,))
    thread.start()
    thread.join()
    assert seen == {"heavy": split.heavy, "light": split.light, "scope": split.heavy, "after": CORES}
    assert frozenset(os.sched_getaffinity(0)) == CORES, "this thread was never moved"


def test_nothing_moves_outside_a_governed_run() -> None:
    assert affinity.current() is None
    before = frozenset(os.sched_getaffinity(0)) if CORES else frozenset()
    affinity.pin_heavy()
    affinity.pin_light()
    with affinity.heavy_scope():
        pass
    if CORES:
        assert frozenset(os.sched_getaffinity(0)) == before
