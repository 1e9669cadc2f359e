"""The exit-code table, measured: each case below is run as a user would type it, and the exit
code and the first line of stderr are printed next to the code the README promises.

    .venv/bin/python scripts/check_exits.py              # every case once (about a minute)
    .venv/bin/python scripts/check_exits.py --runs 10    # each case 10 times (an abort, 134, hid
                                                         # in most runs of a start-up failure once)
    .venv/bin/python scripts/check_exits.py -k signal    # the cases whose name has "signal"

The rule (``edgepipe/cli/exits.py``): 0 done or stopped on request at any moment; 1 something
failed while running (or a deployment command found problems); 2 wrong before anything ran.
The README's table "Exit codes, case by case" lists the same cases with the same codes (a test
keeps the two in step). Cases that need root (a small full tmpfs) say "skipped" elsewhere.
Prints a line per case and a final JSON line; exit 1 if any run ended with another code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PIPELINES = REPO / "pipelines"


@dataclass(frozen=True)
class Case:
    """One command and the code it must end with."""

    name: str
    """As the README's table names it."""
    argv: list[str]
    """After ``edgepipe``."""
    expected: int
    signal_after_s: float | None = None
    """Send :attr:`signum` this long after the start (a stop on request)."""
    signum: int = signal.SIGTERM
    close_stdout: bool = False
    needs: str = ""
    """Why it cannot run here (set when a fixture is missing): reported as skipped."""
    env: dict[str, str] = field(default_factory=dict)


def _clip(folder: Path) -> Path:
    clip = folder / "clip.mp4"
    if not clip.exists():
        subprocess.run(
            [
                sys.executable,
                str(REPO / "scripts" / "make_sample_clip.py"),
                str(clip),
                "--size",
                "320x240",
                "--seconds",
                "1",
            ],
            check=True,
            capture_output=True,
        )
    return clip


def _full_disk(folder: Path) -> tuple[Path | None, str]:
    """A 1 MiB tmpfs, already full, at ``folder/full`` (root only)."""
    mount_point = folder / "full"
    mount_point.mkdir()
    if os.geteuid() != 0:
        return None, "needs root (mounts a small tmpfs)"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        return None, f"cannot mount a tmpfs: {done.stderr.strip()}"
    try:
        with open(mount_point / "filler", "wb") as filler:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
    except OSError:
        pass
    return mount_point, ""


def prepare(tmp: Path) -> tuple[Path, str]:
    """Make every case's inputs in ``tmp``: the clip, and why a full disk cannot be had ("" if it can)."""
    clip = _clip(tmp)
    (tmp / "empty.mp4").write_bytes(b"")
    (tmp / "truncated.mp4").write_bytes(clip.read_bytes()[: clip.stat().st_size // 3])
    (tmp / "folder").mkdir()
    (tmp / "file.txt").write_text("not a folder\n")
    (tmp / "empty.onnx").write_bytes(b"")
    os.mkfifo(tmp / "fifo")
    (tmp / "exits.py").write_text("import sys\nsys.exit(0)\n")
    (tmp / "slow.py").write_text("import time\ntime.sleep(30)\n")
    (tmp / "typo.py").write_text(
        "from edgepipe import Pipeline\ndef pipeline() -> Pipeline:\n    return Pipline('x')\n"
    )
    _, no_full = _full_disk(tmp)
    return clip, no_full


def cases(tmp: Path, clip: Path, no_full: str = "") -> list[Case]:
    """Every case, with its inputs in ``tmp`` (made by :func:`prepare`)."""
    face = str(PIPELINES / "face_privacy.py")
    demo = str(PIPELINES / "demo.py")
    synthetic = ["--source", "synthetic://320x240@15"]
    found = [
        Case("run: --duration ends it", ["run", face, *synthetic, "--duration", "1"], 0),
        Case(
            "run: SIGTERM while the pipeline file loads", ["run", str(tmp / "slow.py")], 0, signal_after_s=1.5
        ),
        Case(
            "run: SIGINT while running",
            ["run", face, *synthetic],
            0,
            signal_after_s=3.0,
            signum=signal.SIGINT,
        ),
        Case(
            "run: SIGHUP while running",
            ["run", face, *synthetic],
            0,
            signal_after_s=3.0,
            signum=signal.SIGHUP,
        ),
        Case("run: a source file that is missing", ["run", face, "--source", str(tmp / "missing.mp4")], 1),
        Case("run: a source file that is empty", ["run", face, "--source", str(tmp / "empty.mp4")], 1),
        Case("run: a source file cut short", ["run", face, "--source", str(tmp / "truncated.mp4")], 1),
        Case("run: a source that is a folder", ["run", face, "--source", str(tmp / "folder")], 1),
        Case(
            "run: --output is a folder", ["run", face, "--output", str(tmp / "folder"), "--duration", "2"], 2
        ),
        Case("run: --output in a missing folder", ["run", face, "--output", str(tmp / "no" / "o.mp4")], 2),
        Case(
            "run: --output on a full disk",
            ["run", face, *synthetic, "--output", str(tmp / "full" / "o.mp4"), "--duration", "3"],
            1,
            needs=no_full,
        ),
        Case(
            "run: --events-dir is a file",
            ["run", demo, "--events-dir", str(tmp / "file.txt"), "--duration", "2"],
            2,
        ),
        Case(
            "run: --events-dir in a missing folder",
            ["run", demo, "--events-dir", str(tmp / "no" / "ev"), "--duration", "2"],
            2,
        ),
        Case(
            "run: --events-dir on a full disk (a clip lost)",
            ["run", face, *synthetic, "--events-dir", str(tmp / "full" / "events"), "--duration", "6"],
            1,
            needs=no_full,
        ),
        Case(
            "run: --results - with stdout closed",
            ["run", face, "--results", "-", "--duration", "2"],
            2,
            close_stdout=True,
        ),
        Case(
            "run: MQTT broker unreachable, QoS 1 messages not delivered",
            ["run", face, *synthetic, "--mqtt", "mqtt://127.0.0.1:1", "--duration", "3"],
            1,
        ),
        Case("run: --port in use", ["run", face, "--port", "{busy_port}", "--duration", "2"], 2),
        Case("run: a pipeline file that calls sys.exit(0)", ["run", str(tmp / "exits.py")], 2),
        Case("run: a pipeline file with a typo", ["run", str(tmp / "typo.py")], 2),
        Case("run: --params is a FIFO", ["run", face, "--params", str(tmp / "fifo")], 2),
        Case("run: --health-file is a FIFO", ["run", face, "--health-file", str(tmp / "fifo")], 2),
        Case("run: an unknown parameter", ["run", face, "--sorce", "x.mp4"], 2),
        Case("graph: stdout closed", ["graph", face], 2, close_stdout=True),
        Case(
            "quantize: -o is a FIFO, with --force",
            ["quantize", "centerface", "--calib", str(clip), "-o", str(tmp / "fifo"), "--force"],
            2,
        ),
        Case(
            "quantize: an empty model file",
            ["quantize", str(tmp / "empty.onnx"), "--calib", str(clip), "-o", str(tmp / "q.onnx")],
            2,
        ),
        Case(
            "quantize: SIGTERM while it works",
            ["quantize", "centerface", "--calib", str(clip), "-o", str(tmp / "stopped.onnx")],
            128 + signal.SIGTERM,
            signal_after_s=2.0,
        ),
        Case(
            "compare: --shape past the memory plan",
            ["compare", "centerface", "centerface", "--shape", "1x3x100000x100000"],
            2,
        ),
        Case("compare: --seed=-5", ["compare", "centerface", "centerface", "--seed=-5"], 2),
        Case("plan: --param-count 3.5", ["plan", "--param-count", "3.5"], 2),
        Case("plan: --param-count -3e9", ["plan", "--param-count", "-3e9"], 2),
        Case(
            "plan: a model that does not fit the device",
            "plan --param-count 3e9 --dtype fp16 --tokens-per-s 20 --layers 32 --kv-heads 8 --head-dim 128 "  # noqa: SIM905 (read as typed)
            "--heads 32 --device jetson-orin-nano-8gb".split(),
            1,
        ),
        Case(
            "run --plan: a pipeline that does not fit",
            ["run", face, "--plan"],
            1,
            env={"EDGEPIPE_MEMORY_FRAC": "0.00001"},
        ),
        Case("check-ops: the model is a FIFO", ["check-ops", str(tmp / "fifo"), "--target", "cpu"], 2),
        Case(
            "trace: -o on a full disk",
            ["trace", face, "--duration", "1", "-o", str(tmp / "full" / "trace.json")],
            1,
            needs=no_full,
        ),
        Case("doctor: a healthy clip", ["doctor", str(clip)], 0),
        Case("doctor: a healthy clip, --timeout-s 0.001", ["doctor", str(clip), "--timeout-s", "0.001"], 1),
        Case("health: no heartbeat file", ["health", str(tmp / "missing.json")], 1),
    ]
    return found


def _busy_port() -> tuple[int, object]:
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken.getsockname()[1], taken


def run_case(case: Case, cwd: Path, port: int) -> tuple[int, str]:
    """Run ``case`` once: its exit code and the first line of its stderr (logs skipped)."""
    argv = [sys.executable, "-m", "edgepipe", *[a.replace("{busy_port}", str(port)) for a in case.argv]]
    close: Callable[[], None] | None = (lambda: os.close(1)) if case.close_stdout else None
    env = {**os.environ, **case.env}
    with subprocess.Popen(
        argv,
        stdout=None if close else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        preexec_fn=close,
        env=env,
    ) as proc:
        if case.signal_after_s is not None:
            time.sleep(case.signal_after_s)
            proc.send_signal(case.signum)
        try:
            _, stderr = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
            return -9, "timed out after 180 s (killed)"
    lines = [line for line in stderr.splitlines() if line.strip() and not line[:2].isdigit()]
    errors = [line for line in lines if line.startswith("edgepipe") and ": error:" in line]
    return proc.returncode, (errors or lines or [""])[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each case (default 1)")
    parser.add_argument("-k", metavar="TEXT", default="", help="only the cases whose name has TEXT")
    args = parser.parse_args()
    report: dict[str, dict[str, object]] = {}
    bad = 0
    port, holder = _busy_port()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        try:
            for case in cases(tmp, *prepare(tmp)):
                if args.k not in case.name:
                    continue
                if case.needs:
                    print(f"skip {case.name}: {case.needs}", file=sys.stderr)
                    report[case.name] = {"expected": case.expected, "skipped": case.needs}
                    continue
                codes: Counter[int] = Counter()
                first = ""
                for _ in range(args.runs):
                    code, first = run_case(case, tmp, port)
                    codes[code] += 1
                unexpected = sum(n for code, n in codes.items() if code != case.expected)
                bad += unexpected
                got = ", ".join(f"{code}" + (f" x{n}" if n > 1 else "") for code, n in sorted(codes.items()))
                mark = "ok  " if not unexpected else "FAIL"
                print(
                    f"{mark} {case.name}: expected {case.expected}, got {got} | {first[:150]}",
                    file=sys.stderr,
                )
                report[case.name] = {
                    "expected": case.expected,
                    "codes": {str(c): n for c, n in codes.items()},
                    "first_line": first,
                }
        finally:
            if (tmp / "full").is_mount():
                subprocess.run(["umount", "-l", str(tmp / "full")], capture_output=True)
    del holder
    print(json.dumps({"check": "exits", "runs": args.runs, "unexpected": bad, "cases": report}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
