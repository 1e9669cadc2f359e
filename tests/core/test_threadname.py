"""OS thread names as the kernel shows them (``/proc``): a tag for life or for a block, inherited by
threads started meanwhile, and threads that rename themselves claimed by id."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

import pytest

from edgepipe.core import threadname
from edgepipe.core.threadname import Tag

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are Linux's")


def in_thread(fn: Callable[[], object]) -> object:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def test_a_tag_names_the_thread_as_proc_shows_it() -> None:
    tag = Tag("front_door_camera_entrance", "decode")

    def body() -> tuple[str, str, Tag | None]:
        threadname.name_thread(tag)
        return (
            threadname.task_name(threading.get_native_id()),
            threadname.thread_name(),
            threadname.current_tag(),
        )

    shown, own, current = in_thread(body)  # type: ignore[misc]
    assert shown == own == tag.name
    assert len(tag.name.encode()) <= threadname.COMM_BYTES
    assert tag.name.startswith("ep")
    assert ":front_door" in tag.name
    assert current is tag
    assert threadname.tag_named(tag.name) is tag
    assert tag.key() == ("front_door_camera_entrance", "decode")


def test_a_block_names_the_thread_and_its_name_comes_back() -> None:
    tag = Tag("faces", "model")

    def body() -> tuple[str, str, str]:
        threadname.set_thread_name("worker-7")
        with threadname.named(tag):
            during = threadname.thread_name()
        return during, threadname.thread_name(), str(threadname.current_tag())

    during, after, current = in_thread(body)  # type: ignore[misc]
    assert (during, after, current) == (tag.name, "worker-7", "None")


def test_a_thread_started_under_a_tag_inherits_it() -> None:
    # Python sets no OS name on its threads: like a native one, it keeps its creator's.
    tag = Tag("describe", "tokens")

    def body() -> str:
        with threadname.named(tag):
            return str(in_thread(threadname.thread_name))

    assert in_thread(body) == tag.name


def test_threads_that_rename_themselves_are_claimed_by_id() -> None:
    tag = Tag("cam0", "decode")
    renamed: dict[str, int] = {}
    release = threading.Event()

    def codec_thread() -> None:  # what FFmpeg's frame threads do as they start
        threadname.set_thread_name("av:h264:df0")
        renamed["tid"] = threading.get_native_id()
        release.wait(5)

    def open_codec() -> threading.Thread:
        thread = threading.Thread(target=codec_thread)
        with threadname.native_threads(tag):
            thread.start()
            while "tid" not in renamed:
                pass
        return thread

    started = in_thread(open_codec)
    try:
        assert threadname.claimed()[renamed["tid"]] is tag
    finally:
        release.set()
        started.join()  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/self/task/{renamed['tid']}") and time.monotonic() < deadline:
        time.sleep(0.001)  # the OS thread outlives its join() by a moment
    with threadname.native_threads(tag):  # the next claim forgets threads that are gone (ids are reused)
        pass
    assert renamed["tid"] not in threadname.claimed()


def test_a_tag_can_follow_what_names_its_owner_later() -> None:
    owner = {"now": ("centerface", "model")}
    tag = Tag("centerface", "model", follow=lambda: owner["now"])
    owner["now"] = ("faces", "model")
    assert tag.key() == ("faces", "model")
    assert Tag("x", "model", follow=lambda: None).key() == ("x", "model")


def test_names_are_cut_to_what_the_kernel_keeps() -> None:
    assert threadname.comm_of("ep12:" + "é" * 10) == "ep12:" + "é" * 5  # 15 bytes, no half character
    assert threadname.comm_of("ep1:\udcd6\udcd0.onnx") == "ep1:??.onnx"  # a model named in GBK bytes


def test_a_stat_line_gives_the_name_even_with_spaces_and_parentheses() -> None:
    line = "7 (ep3:cam (1) x) S 1 7 7 0 -1 4194368 500 0 0 0 120 30 0 0 20 0 3 0 12345 1000000 2000\n"
    assert threadname.parse_stat(line) == ("ep3:cam (1) x", 150)
    name, cpu_ns = threadname.read_stat(threading.get_native_id())
    assert name == threadname.thread_name()
    assert cpu_ns >= 0


def test_threads_claimed_for_a_tag_are_noted_with_their_time_as_they_end() -> None:
    tag = Tag("cam5", "decode")
    release, started = threading.Event(), threading.Event()
    tids: list[int] = []

    def codec_thread() -> None:
        tids.append(threading.get_native_id())
        threadname.set_thread_name("av:h264:df0")
        started.set()
        release.wait(5)

    thread = threading.Thread(target=codec_thread)

    def open_and_close() -> dict[int, tuple[Tag, int]]:
        threadname.name_thread(tag)  # a source's decode thread, for its life
        with threadname.native_threads():
            thread.start()
            started.wait(5)
        threadname.ending()  # the calling thread's tag: as StreamDecoder.close does
        return threadname.endings()

    try:
        noted = in_thread(open_and_close)
    finally:
        release.set()
        thread.join()
    mine = {tid: cpu for tid, (t, cpu) in noted.items() if t is tag}  # type: ignore[attr-defined]
    assert list(mine) == tids
    assert tids[0] not in threadname.endings()  # each is given once


def test_a_tagged_thread_notes_its_own_time_outside_counted_calls_as_it_ends() -> None:
    from edgepipe.core import cputime

    tag = Tag("describe", "tokens")

    def life() -> tuple[int, int, int]:
        threadname.name_thread(tag)
        with cputime.counted(("describe", "tokens")):
            end = time.thread_time() + 0.02
            while time.thread_time() < end:
                pass
        end = time.thread_time() + 0.01
        while time.thread_time() < end:  # outside any counted call: sampling, the tokenizer
            pass
        threadname.thread_ending()
        return threading.get_native_id(), time.thread_time_ns(), cputime.own_total_ns()

    tid, total_ns, counted_ns = in_thread(life)  # type: ignore[misc]
    noted_tag, outside_ns = threadname.endings()[tid]
    assert noted_tag is tag
    assert counted_ns >= 0.019e9
    assert 0.009e9 <= outside_ns <= total_ns - counted_ns
