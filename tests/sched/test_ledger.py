"""The CPU ledger's arithmetic, on threads and clocks given by the test: /proc's stat lines, who a
thread's time belongs to, counted calls without double counting, overhead never negative."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from edgepipe.core import cputime, threadname
from edgepipe.core.cputime import CODE, DECODE, MODEL, TOKENS
from edgepipe.core.threadname import Tag
from edgepipe.sched.gate import Ticket
from edgepipe.sched.ledger import CpuLedger, TaskCpu, read_tasks, ticket_tag

MS = 1_000_000
RUNTIME_TID = 100


def stat_line(tid: int, name: str, utime: int, stime: int) -> str:
    return (f"{tid} ({name}) S 1 {tid} {tid} 0 -1 4194368 500 0 0 0 {utime} {stime} 0 0 20 0 3 0 "
            "12345 1000000 2000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 -1 0 0 0 0 0 0\n")  # fmt: skip


def test_read_tasks_reads_each_threads_name_and_time_and_skips_what_it_cannot(tmp_path: Path) -> None:
    for tid, text in ((11, stat_line(11, "python", 5, 1)), (12, stat_line(12, "av:h264:df0", 200, 0)),
                      (13, "garbage")):  # fmt: skip
        (tmp_path / str(tid)).mkdir()
        (tmp_path / str(tid) / "stat").write_text(text)
    (tmp_path / "14").mkdir()  # a thread that ended between the listing and the read
    tasks = sorted(read_tasks(str(tmp_path), ticks_per_s=100), key=lambda t: t.tid)
    assert tasks == [TaskCpu(11, "python", 60 * MS), TaskCpu(12, "av:h264:df0", 2000 * MS)]
    assert read_tasks(str(tmp_path / "missing")) == []


def test_read_tasks_sees_this_process() -> None:
    tasks = read_tasks()
    assert tasks
    assert all(t.cpu_ns >= 0 and t.name for t in tasks)


def account(tid: int, done: dict[tuple[str, str], int] | None = None,
            running: Iterable[tuple[tuple[str, str], int]] = ()) -> cputime.Account:  # fmt: skip
    """A thread's counts as the ledger reads them: finished calls, and calls running since a
    CPU time (ns) of that thread."""
    a = cputime.Account()
    a.tid, a.done = tid, dict(done or {})
    a.stack = [[key, start_ns, 0] for key, start_ns in running]
    return a


class World:
    """The threads, clocks and counts a ledger reads, set by the test between samples."""

    def __init__(self) -> None:
        self.t = 0.0
        self.process_ns = 0
        self.tasks: dict[int, TaskCpu] = {}
        self.accounts: list[cputime.Account] = []
        self.ended: dict[tuple[str, str], int] = {}
        self.claims: dict[int, Tag] = {}
        self.endings: dict[int, tuple[Tag, int]] = {}

    def thread(self, tid: int, name: str, cpu_ms: float) -> None:
        self.tasks[tid] = TaskCpu(tid, name, int(cpu_ms * MS))

    def ledger(self) -> CpuLedger:
        return CpuLedger(runtime_tid=RUNTIME_TID, tasks=lambda: list(self.tasks.values()),
                         process_ns=lambda: self.process_ns, clock=lambda: self.t,
                         counts=lambda running: (dict(self.ended), list(self.accounts)),
                         claims=lambda: dict(self.claims), endings=self.take_endings)  # fmt: skip

    def take_endings(self) -> dict[int, tuple[Tag, int]]:
        taken, self.endings = self.endings, {}
        return taken


class seconds(dict):  # noqa: N801 - read as a function
    """Per node (and "" for the runtime and overhead): kind -> seconds; ``flat`` as (node, kind)."""

    def __init__(self, ledger: CpuLedger) -> None:
        snap = ledger.snapshot()
        super().__init__({node: figures["kinds_s"] for node, figures in snap["nodes"].items()})
        self[""] = {k: v for k, v in snap["kinds_s"].items() if k in ("runtime", "overhead")}
        self.flat = {(node, kind): v for node, kinds in self.items() for kind, v in kinds.items()}


def test_every_cpu_second_goes_to_a_node_and_kind_and_the_rest_is_overhead() -> None:
    world = World()
    decode, session = Tag("cam0", DECODE), Tag("faces-model", MODEL)
    world.thread(RUNTIME_TID, "python", 500)  # before the ledger began: nobody's here
    world.thread(2, decode.name, 100)
    world.thread(3, "python", 0)  # a worker
    world.accounts = [account(3)]
    world.process_ns = 600 * MS
    ledger = world.ledger()

    world.t = 1.0
    world.thread(RUNTIME_TID, "python", 550)  # +50: the event loop
    world.thread(2, decode.name, 400)  # +300: the decode thread
    world.thread(5, "av:h264:df0", 100)  # FFmpeg's frame thread, renamed, claimed by id
    world.claims = {5: decode}
    world.thread(3, "python", 200)  # a worker: 50 of the detector's own code, 120 of model runs
    world.accounts = [account(3, {("faces", CODE): 50 * MS, ("faces", MODEL): 120 * MS})]
    world.thread(4, session.name, 100)  # ONNX Runtime's intra-op thread, named after the session
    session.follow = lambda: ("faces", MODEL)  # the detector named itself the owner meanwhile
    world.process_ns = (600 + 50 + 300 + 100 + 200 + 100 + 40) * MS  # + 40 of threads that ended
    ledger.sample({"faces": (10, 2.0), "cam0": (30, 0.0)})

    assert seconds(ledger).flat == pytest.approx({
        ("cam0", DECODE): 0.4,
        ("faces", "pre"): 0.05, ("faces", MODEL): 0.22,  # a model node's own code is its pre-processing
        ("", "runtime"): 0.05, ("", "overhead"): 0.03 + 0.04,  # the worker's idle 30, the ended 40
    })  # fmt: skip
    snap = ledger.snapshot()
    assert sum(snap["kinds_s"].values()) == pytest.approx(snap["process_s"]) == pytest.approx(0.79)
    assert snap["kinds_cores"] == pytest.approx({DECODE: 0.4, "pre": 0.05, MODEL: 0.22, "runtime": 0.05,
                                                 "overhead": 0.07})  # fmt: skip
    faces = snap["nodes"]["faces"]
    assert faces["cpu_ms_per_item"] == pytest.approx(27.0)  # 270 ms over 10 items
    assert faces["wall_ms_per_item"] == pytest.approx(200.0)  # 2 s busy over 10: waiting for a core
    assert snap["nodes"]["cam0"]["cpu_ms_per_item"] == pytest.approx(400 / 30, abs=1e-3)
    assert snap["nodes"]["cam0"]["wall_ms_per_item"] is None


def test_a_call_seen_running_by_one_sample_is_not_counted_again_when_it_ends() -> None:
    world = World()
    lm = Tag("describe", TOKENS)
    world.thread(6, lm.name, 0)
    world.accounts = [account(6)]
    ledger = world.ledger()
    step = ("describe", TOKENS)

    world.t, world.process_ns = 1.0, 100 * MS
    world.thread(6, lm.name, 100)
    world.accounts = [account(6, running=[(step, 0)])]  # one long step, 100 ms in
    ledger.sample()
    assert seconds(ledger)["describe"] == pytest.approx({TOKENS: 0.1})

    world.t, world.process_ns = 2.0, 150 * MS
    world.thread(6, lm.name, 150)  # the step ended at 120; 30 of sampling and the tokenizer
    world.accounts = [account(6, {step: 120 * MS})]
    ledger.sample()
    assert seconds(ledger)["describe"] == pytest.approx({TOKENS: 0.15})
    assert seconds(ledger)[""]["overhead"] == pytest.approx(0.0)

    world.t, world.process_ns = 3.0, 159 * MS
    world.thread(6, lm.name, 150)  # 10 ms ticks: a step of 9 ms ended, the clock shows nothing yet
    world.accounts = [account(6, {step: 129 * MS})]
    ledger.sample()
    assert seconds(ledger)["describe"] == pytest.approx({TOKENS: 0.159})
    assert ledger.snapshot()["kinds_cores"][TOKENS] == pytest.approx(0.009)


def test_overhead_is_never_negative_and_a_reused_thread_id_starts_from_nothing() -> None:
    world = World()
    tag = Tag("cam1", DECODE)
    world.thread(7, tag.name, 500)
    ledger = world.ledger()

    world.t, world.process_ns = 1.0, 5 * MS  # a process clock behind the threads' (rounding)
    world.thread(7, tag.name, 510)
    ledger.sample()
    assert seconds(ledger)[""]["overhead"] == 0.0
    assert seconds(ledger)["cam1"] == pytest.approx({DECODE: 0.01})

    world.t, world.process_ns = 2.0, 30 * MS
    world.thread(7, tag.name, 20)  # that thread ended; a new one got its id
    ledger.sample()
    assert seconds(ledger)["cam1"] == pytest.approx({DECODE: 0.03})


def test_counts_from_before_the_ledger_and_of_ended_threads() -> None:
    world = World()
    key = ("rec", CODE)
    world.ended = {key: 70 * MS}  # before the ledger began
    world.thread(8, "python", 0)
    world.accounts = [account(8, {key: 10 * MS})]
    ledger = world.ledger()

    world.t, world.process_ns = 1.0, 50 * MS
    world.accounts = []  # thread 8 ended after 40 more ms of counted calls: its 50 join the 70
    world.ended = {key: 120 * MS}
    del world.tasks[8]
    ledger.sample()
    assert seconds(ledger)["rec"] == pytest.approx({CODE: 0.04})


def test_the_window_is_the_last_second_and_totals_the_whole_run() -> None:
    world = World()
    tag = Tag("cam2", DECODE)
    world.thread(9, tag.name, 0)
    ledger = world.ledger()
    for second, cpu_ms in enumerate((100, 400, 500), start=1):
        world.t, world.process_ns = float(second), cpu_ms * MS
        world.thread(9, tag.name, cpu_ms)
        ledger.sample()
    snap = ledger.snapshot()
    assert snap["window_s"] == pytest.approx(1.0)
    assert snap["process_cores"] == pytest.approx(0.1)
    assert snap["kinds_cores"][DECODE] == pytest.approx(0.1)
    assert snap["kinds_s"][DECODE] == pytest.approx(0.5)
    assert snap["elapsed_s"] == pytest.approx(3.0)
    assert ledger.snapshot() is snap  # the same figures until the next sample


def test_a_tickets_threads_follow_its_owner() -> None:
    ticket = Ticket("centerface", "model")
    tag = ticket_tag(ticket)
    assert tag.key() == ("centerface", MODEL)
    ticket.set_owner("describe", "lm", 0)
    assert tag.key() == ("describe", TOKENS)
    assert threadname.tag_named(tag.name) is tag


def test_a_codecs_threads_noted_as_they_end_count_after_they_are_gone() -> None:
    world = World()
    decode = Tag("cam3", DECODE)
    world.thread(10, decode.name, 0)
    world.thread(11, "av:h264:df0", 0)
    world.claims = {11: decode}
    ledger = world.ledger()

    world.t, world.process_ns = 1.0, 300 * MS
    world.thread(10, decode.name, 100)
    world.thread(11, "av:h264:df0", 200)
    ledger.sample()
    world.endings = {11: (decode, 260 * MS)}  # the codec closed (a looped file's end)...
    world.thread(11, "av:h264:df0", 270)  # ... its thread still ran a little
    world.t, world.process_ns = 2.0, 420 * MS
    world.thread(10, decode.name, 130)
    ledger.sample()
    assert seconds(ledger)["cam3"] == pytest.approx({DECODE: 0.40})

    world.t, world.process_ns = 3.0, 500 * MS
    del world.tasks[11]  # gone: what it did after the last sample, as noted, is cam3's
    world.thread(10, decode.name, 150)
    world.thread(12, "av:h264:df0", 20)  # the reopened codec's thread, claimed
    world.claims = {12: decode}
    world.endings = {13: (decode, 30 * MS)}  # one that came and went between two samples
    ledger.sample()
    assert seconds(ledger)["cam3"] == pytest.approx({DECODE: 0.15 + 0.27 + 0.02 + 0.03})
    assert seconds(ledger)[""]["overhead"] == pytest.approx(0.5 - 0.47)
