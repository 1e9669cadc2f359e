"""Counted calls: exclusive of the calls inside them, readable from another thread while they run,
and folded into one total when their thread ends."""

from __future__ import annotations

import os
import threading
import time

import pytest

from edgepipe.core import cputime


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def mine() -> cputime.Account:
    return next(a for a in cputime.collect()[1] if a.tid == threading.get_native_id())


def test_a_call_inside_another_is_subtracted_from_it() -> None:
    outer, inner = ("nested", cputime.CODE), ("nested", cputime.MODEL)  # keys of this test alone
    with cputime.counted(outer):
        burn(0.02)
        with cputime.counted(inner):
            burn(0.03)
        burn(0.01)
    done, total = mine().read(None)
    assert 0.028e9 <= done[outer] < 0.040e9  # 20 + 10 ms of its own, not the 30 inside
    assert 0.029e9 <= done[inner] < 0.040e9
    assert total == sum(done.values())


def test_a_running_call_is_read_up_to_the_time_given() -> None:
    started, release = threading.Event(), threading.Event()
    key = ("lm", cputime.TOKENS)
    seen: dict[str, int] = {}

    def step() -> None:
        with cputime.counted(key):
            burn(0.02)
            seen["tid"] = threading.get_native_id()
            seen["now"] = time.thread_time_ns()
            started.set()
            release.wait(5)

    thread = threading.Thread(target=step)
    thread.start()
    assert started.wait(5)
    account = next(a for a in cputime.collect()[1] if a.tid == seen["tid"])
    running, _ = account.read(seen["now"])
    finished, _ = account.read(None)
    release.set()
    thread.join()
    assert running[key] >= 0.019e9  # the call so far, though it has not ended
    assert key not in finished


def test_an_ended_threads_counts_move_to_the_total_once() -> None:
    key = ("ended-node", cputime.CODE)
    tids: list[int] = []

    def work() -> None:
        tids.append(threading.get_native_id())
        burn(0.01)

    thread = threading.Thread(target=cputime.run_counted, args=(key, work))
    thread.start()
    thread.join()
    # Its OS thread may outlive the Python one by a moment: while /proc lists it, the account
    # stays apart, so that the ledger does not take its time for uncounted.
    ended, accounts = cputime.collect(running=tids)
    assert key not in ended
    assert any(key in a.done for a in accounts)
    ended, accounts = cputime.collect()
    assert ended[key] >= 0.009e9
    assert all(key not in a.done for a in accounts)
    again, _ = cputime.collect()
    assert again[key] == ended[key]


def test_an_end_without_a_begin_is_harmless() -> None:
    cputime.end()
    assert cputime.heavy_key("faces", "detect") == ("faces", cputime.MODEL)
    assert cputime.heavy_key("describe", "lm") == ("describe", cputime.TOKENS)
    assert cputime.heavy_key("rec", "encode") == ("rec", cputime.ENCODE)


def test_accounts_of_ended_threads_do_not_pile_up_without_a_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cputime, "SWEEP_AT", 4)
    key = ("churn", cputime.CODE)
    tids: list[int] = []
    for _ in range(12):  # threads that come and go (a pool's spare workers), nobody reading
        thread = threading.Thread(
            target=cputime.run_counted, args=(key, lambda: tids.append(threading.get_native_id()))
        )
        thread.start()
        thread.join()
        while os.path.exists(f"/proc/self/task/{tids[-1]}"):
            time.sleep(0.001)
    ended, accounts = cputime.collect(running=tids)  # what the sweeps left
    assert sum(a.tid in tids for a in accounts) <= 4
    assert ended[key] + sum(a.done.get(key, 0) for a in accounts) > 0  # folded, not lost
