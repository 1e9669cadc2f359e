"""The commands the documents show (README.md, docs/, CONTRIBUTING.md, pipelines/), found and
adapted to run inside the test suite (no test here; tests/test_readme_commands.py runs them).

What counts as a command:

- every line of a fenced ``sh`` (``bash``, ``shell``, ``console``) block, and every ``$ `` line
  of any fenced block. In a block with ``$ `` lines the other lines are the output shown, whose
  shape is checked: the same lines in the same order, the words as written, numbers and sizes
  (``1.8 MB``) free, runs of spaces free, other lines allowed between. A line ending in ``\\``
  continues on the next; ``#`` starts a comment; a comment that begins ``exit N`` or ``exits N``
  (``# exits 2: no model``) gives the exit code expected, 0 otherwise.
- inline code in prose when it is a whole ``edgepipe ...`` command (``edgepipe models list``,
  ``edgepipe run pipelines/demo.py --plan``) with no placeholder (an upper-case word such as
  NAME, URL or DIR, or ``…``, ``...``, ``[``, ``|``, ``<``). A subcommand's bare name that needs
  more (``edgepipe run``, ``edgepipe graph``) and other inline code are references.

Every part of a command (split at ``&&``, ``||``, ``;`` and ``|``) must be one the suite can
run: ``edgepipe``, ``.venv/bin/edgepipe``, ``python -m edgepipe`` and ``python scripts/X.py``
(``python``, ``python3``, ``.venv/bin/python``). Set-up steps (``python3 -m venv``, ``pip
install``) chained with such a command are taken as done (the suite runs in the environment they
make) and dropped; filters (``head``, ``grep`` …) may follow a ``|``. Anything else, and a
block that is only set-up, needs ``<!-- readme-test: skip (REASON) -->`` on the line before the
block's opening fence: the harness skips that block and fails on any unmarked command it cannot
classify.

Adaptations, each keeping what the command means:

- ``edgepipe run`` gets ``--duration 2`` (4 when it reads the RTSP stand-in; a longer one is
  shortened; ``--plan`` and ``--help`` get none) and a heartbeat file (``--health-file``): a run the README shows working must have
  moved input (an item out of a stage or into a sink: tests/support/readme_checks.py); a run that saw
  nothing (a camera it never reached) fails, whatever its exit code;
- ``rtsp://`` at a documentation address (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
  ``example.com``) becomes the test's RTSP server on 127.0.0.1, in the command and in the files
  it reads (below); any address left that is not loopback, anywhere in what runs, fails the
  test (no test reaches the internet);
- ``--port N`` becomes a free port;
- an input the command names that is not there is made where it names it: ``--source X.mp4``
  (any video file) a short generated clip, ``--model DIR`` (and ``bench lm DIR``) a tiny
  random-weight language model with its ``tokenizer.json``;
- a file a fenced block shows with its path as its first line (``# camera.toml``) is written
  there when a command names it, its addresses stood in for as a command's are, unless the
  path is in one of the repository's own folders (``# pipelines/hello.py``): such a file must be
  shipped (and tests/test_readme.py checks it is the same).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

SHORT_DURATION_S = 2.0
CAMERA_DURATION_S = 4.0  # a run from the RTSP stand-in: connecting takes its share
SHELL_LANGS = frozenset({"sh", "bash", "shell", "console"})
MARKER = re.compile(r"^<!-- readme-test: skip \((?P<reason>.*\S.*)\) -->$")
FENCE = re.compile(r"^\s*```(?P<lang>[\w+-]*)\s*$")
EXIT = re.compile(r"#\s*exits? (?P<code>\d+)\b")
INLINE = re.compile(r"`(?P<cmd>(?:\.venv/bin/)?edgepipe [^`]+)`")
NAMES_ONLY = frozenset(
    {"run", "graph", "health", "bench", "bench lm", "models", "models pull", "models path"}
    | {"plan", "check-ops", "quantize", "compare", "doctor", "trace"}  # the deployment commands
)
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'`]*", re.IGNORECASE)
IPV4 = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?![\w.])")
HEARTBEAT = ".readme-run-{}.heartbeat.json"
HEALTH_FILE = re.compile(r"--health-file(?:=| )(?P<path>\S+)")  # in a script
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9_]+\b|…|\.\.\.|[\[|<]")
SHOWN_FILE = re.compile(r"^# (?P<path>[\w./-]+\.\w+)$")

EDGEPIPES = frozenset({"edgepipe", ".venv/bin/edgepipe"})
PYTHONS = frozenset({"python", "python3", ".venv/bin/python", ".venv/bin/python3"})
FILTERS = frozenset({"head", "tail", "grep", "wc", "sort", "cat"})
OPERATORS = frozenset({"&&", "||", ";", "|"})
VIDEO_SUFFIXES = frozenset({".mp4", ".mkv", ".mov", ".ts", ".avi", ".webm", ".h264", ".h265"})
DOC_NETWORKS = tuple(ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))
DOC_HOSTS = ("example.com", "example.org", "example.net")
ADD_A_MARKER = (
    "add `<!-- readme-test: skip (REASON) -->` on the line before its block, or make it a "
    "command the suite can run (see tests/support/readme_commands.py)"
)


class Unrunnable(Exception):
    """A command the harness cannot run as written (the message says why and what to do)."""


@dataclass(frozen=True)
class Block:
    doc: str  # the document's name, e.g. README.md
    line: int  # of the opening fence, 1-based
    lang: str
    lines: tuple[str, ...]
    skip: str | None  # the marker's reason


@dataclass(frozen=True)
class Command:
    where: str  # README.md:17
    text: str  # as written, continuations joined
    output: tuple[str, ...] = ()  # the output the document shows under a `$ ` line

    @property
    def exit_code(self) -> int:
        found = EXIT.search(self.text)
        return int(found["code"]) if found else 0


class StandIns(Protocol):
    """What the harness puts in place of what the suite cannot reach."""

    def rtsp_url(self) -> str: ...
    def port(self) -> int: ...
    def language_model(self, folder: Path) -> None: ...
    def clip(self, path: Path) -> None: ...


def blocks(doc: str, text: str) -> list[Block]:
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before.strip())
        found.append(Block(doc, i + 1, opening["lang"], tuple(lines[i + 1 : end]),
                           marker["reason"] if marker else None))  # fmt: skip
        i = end + 1
    return found


def marker_errors(doc: str, text: str) -> list[str]:
    """Markers that are malformed, or that no fenced block follows."""
    errors = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not (line.lstrip().startswith("<!--") and "readme-test" in line):
            continue  # inline code may name the marker
        after = next((n for n in lines[i + 1 :] if n.strip()), "")
        if not MARKER.match(line.strip()):
            errors.append(f"{doc}:{i + 1}: write the marker as <!-- readme-test: skip (REASON) -->")
        elif not FENCE.match(after):
            errors.append(f"{doc}:{i + 1}: a skip marker must be the line before a block's opening fence")
    return errors


def commands(doc: str, text: str) -> Iterator[tuple[Command, Block | None]]:
    """Every command of the document (``doc``: its name) with its block (None for inline code)."""
    for block in blocks(doc, text):
        prompt = any(line.startswith("$ ") for line in block.lines)
        if block.lang not in SHELL_LANGS and not prompt:
            continue
        for command in _block_commands(block, prompt):
            yield command, block
    in_block = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_block = not in_block
        if in_block:
            continue
        for found in INLINE.finditer(line):
            words = found["cmd"].split()[1:]
            if not PLACEHOLDER.search(found["cmd"]) and " ".join(words) not in NAMES_ONLY:
                yield Command(f"{doc}:{n}", found["cmd"]), None


def _block_commands(block: Block, prompt: bool) -> Iterator[Command]:
    pending: list[str] = []
    start = 0
    current: Command | None = None
    output: list[str] = []
    for offset, raw in enumerate(block.lines, 1):
        line = raw.rstrip()
        if prompt and not pending and not line.startswith("$ "):
            if current is not None and line:
                output.append(line)
            continue
        if not pending:
            start = block.line + offset
            line = line.removeprefix("$ ")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        pending.append(line.removesuffix("\\").strip())
        if line.endswith("\\"):
            continue
        if current is not None:
            yield Command(current.where, current.text, tuple(output))
        current, pending, output = Command(f"{block.doc}:{start}", " ".join(pending)), [], []
    if current is not None:
        yield Command(current.where, current.text, tuple(output))


def tokens(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _words(argv: list[str]) -> list[str]:
    """The command's words after leading NAME=value assignments."""
    i = 0
    while i < len(argv) and re.fullmatch(r"[A-Za-z_]\w*=.*", argv[i]):
        i += 1
    return argv[i:]


def kind(argv: list[str]) -> str:
    """``run``, ``setup``, ``filter`` or ``other``."""
    words = _words(argv)
    if not words:
        return "other"
    head, rest = words[0], words[1:]
    if head in EDGEPIPES or (head in PYTHONS and rest[:2] == ["-m", "edgepipe"]):
        return "run"
    if head in PYTHONS and rest and rest[0].startswith("scripts/") and rest[0].endswith(".py"):
        return "run"
    if head in PYTHONS and rest[:2] == ["-m", "venv"]:
        return "setup"
    if Path(head).name in {"pip", "pip3"} and rest[:1] == ["install"]:
        return "setup"
    if head in PYTHONS and rest[:3] == ["-m", "pip", "install"]:
        return "setup"
    return "filter" if head in FILTERS else "other"


def script(command: Command, cwd: Path, stand_ins: StandIns, files: Mapping[str, str] | None = None) -> str:
    """The command as a bash script, adapted; Unrunnable if it cannot run in the suite. ``files``
    (path -> text, :func:`shown_files`) are written into ``cwd`` where the command names them."""
    parts: list[tuple[list[str], str]] = []  # (argv, the operator after it)
    argv: list[str] = []
    for token in tokens(command.text):
        if token in OPERATORS:
            parts.append((argv, token))
            argv = []
        else:
            argv.append(token)
    parts.append((argv, ""))
    kinds = [kind(a) for a, _ in parts]
    if "run" not in kinds or "other" in kinds:
        what = next((" ".join(a) for (a, _), k in zip(parts, kinds, strict=True) if k != "run"), "")
        raise Unrunnable(f"{command.where}: `{what or command.text}` cannot run in the suite: {ADD_A_MARKER}")
    kept: list[str] = []
    runs = 0
    for i, ((words, operator), part_kind) in enumerate(zip(parts, kinds, strict=True)):
        if part_kind == "setup":
            if operator != "&&":
                raise Unrunnable(f"{command.where}: a set-up step must be chained with `&&`: {ADD_A_MARKER}")
            continue
        if part_kind == "filter" and (i == 0 or parts[i - 1][1] != "|"):
            raise Unrunnable(f"{command.where}: `{words[0]}` runs only after a `|`: {ADD_A_MARKER}")
        if part_kind == "run":
            words = adapt(words, cwd, stand_ins, dict(files or {}), HEARTBEAT.format(runs))
            runs += 1
        kept.append(" ".join(t if re.fullmatch(r"[<>&|;]+", t) else shlex.quote(t) for t in words))
        kept.append(operator)
    text = "set -o pipefail\n" + " ".join(kept).strip()
    refuse_addresses(command.where, text)
    return text


def adapt(
    argv: list[str],
    cwd: Path,
    stand_ins: StandIns,
    files: Mapping[str, str] | None = None,
    heartbeat: str = "",
) -> list[str]:
    words = _words(argv)
    out = argv[: len(argv) - len(words)]
    duration = SHORT_DURATION_S
    for i, word in enumerate(words):
        before = words[i - 1] if i else ""
        named = word.partition("=")[2] if word.startswith("--") else word
        if files and named in files and not (cwd / named).exists():
            (cwd / named).parent.mkdir(parents=True, exist_ok=True)
            written = stand_in_addresses(files[named], stand_ins)
            refuse_addresses(named, written)
            duration = CAMERA_DURATION_S if written != files[named] else duration
            (cwd / named).write_text(written)
        if "://" in word:
            stood_in = _address(word, stand_ins)
            duration = CAMERA_DURATION_S if stood_in != word else duration
            word = stood_in
        elif before == "--port":
            word = str(stand_ins.port())
        elif word.startswith("--port="):
            word = f"--port={stand_ins.port()}"
        elif before == "--model" or words[i - 2 : i] == ["bench", "lm"]:
            _model(word, cwd, stand_ins)
        elif (
            before == "--source" and Path(word).suffix.lower() in VIDEO_SUFFIXES and not (cwd / word).exists()
        ):
            stand_ins.clip(cwd / word)
        out.append(word)
    if _subcommand(words) == "run" and not {"--plan", "--help", "-h"} & set(words):
        out = _short_duration(out, duration)
        if heartbeat and not any(HEALTH_FILE.match(w) or w == "--health-file" for w in out):
            out += ["--health-file", heartbeat]
    return out


def stand_in_addresses(text: str, stand_ins: StandIns) -> str:
    """``text`` (a file a command reads) with its addresses stood in for as a command's are."""
    return URL.sub(lambda found: _address(found[0], stand_ins), text)


def refuse_addresses(where: str, *texts: str) -> None:
    """Unrunnable if any address in ``texts`` (what runs, what it reads) is not loopback."""
    for text in texts:
        for found in URL.finditer(text):
            parts = urlsplit(found[0])
            if parts.scheme not in {"synthetic", "file"} and not _loopback(parts.hostname or ""):
                raise Unrunnable(f"{where}: `{found[0]}` left in what runs (tests reach only 127.0.0.1)")
        for address in IPV4.findall(text):
            if not _loopback(address):
                raise Unrunnable(f"{where}: `{address}` left in what runs (tests reach only 127.0.0.1)")


def _subcommand(words: list[str]) -> str:
    """The edgepipe subcommand (``run``, ``graph`` …); "" for a script."""
    if words[0] in PYTHONS and words[1:3] != ["-m", "edgepipe"]:
        return ""
    rest = words[3:] if words[0] in PYTHONS else words[1:]
    return next((w for w in rest if not w.startswith("-")), "")


def _short_duration(argv: list[str], limit: float) -> list[str]:
    for i, word in enumerate(argv):
        if word == "--duration" and i + 1 < len(argv):
            value = min(float(argv[i + 1]), limit)
            return [*argv[: i + 1], f"{value:g}", *argv[i + 2 :]]
        if word.startswith("--duration="):
            value = min(float(word.partition("=")[2]), limit)
            return [*argv[:i], f"--duration={value:g}", *argv[i + 1 :]]
    return [*argv, "--duration", f"{limit:g}"]


def _address(url: str, stand_ins: StandIns) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme in {"synthetic", "file"} or _loopback(host):
        return url
    if _documentation(host):
        if parts.scheme != "rtsp":
            raise Unrunnable(f"`{url}`: the suite stands in for rtsp:// addresses only: {ADD_A_MARKER}")
        return stand_ins.rtsp_url()
    raise Unrunnable(f"`{url}` is a real address (tests reach only 127.0.0.1): use 192.0.2.x in examples")


def _model(name: str, cwd: Path, stand_ins: StandIns) -> None:
    if ("/" not in name and not name.endswith(".onnx")) or (cwd / name).exists():
        return  # a registry name, or there
    if name.endswith(".onnx"):
        raise Unrunnable(f"no model file `{name}` to stand in for: {ADD_A_MARKER}")
    stand_ins.language_model(cwd / name)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _documentation(host: str) -> bool:
    if host.endswith(DOC_HOSTS):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in DOC_NETWORKS)


def shown_files(text: str) -> dict[str, str]:
    """Files a fenced block shows with their path as its first line: path -> contents."""
    files = {}
    for block in blocks("", text):
        first = SHOWN_FILE.match(block.lines[0]) if block.lines else None
        if first is not None:
            files[first["path"]] = "\n".join(block.lines) + "\n"
    return files
