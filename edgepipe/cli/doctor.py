"""``edgepipe doctor PATH...``: why media or text fails to decode
(see :mod:`edgepipe.deploy.doctor.diagnose`).

    edgepipe doctor clip.mp4 photos/ notes.txt
    edgepipe doctor recordings/ --format json

Exit 0: nothing wrong found; 1: problems found, or a file not checked in time (its decoder
passed ``--timeout-s``: nothing was verified, so not 0, and nothing found wrong either: it is
named "not checked in time", never "damaged"); 2: a path that does not exist (the others are
still diagnosed) or a wrong option.
"""

from __future__ import annotations

import argparse
from typing import Any

from edgepipe.cli.exits import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from edgepipe.cli.failures import error
from edgepipe.core.units import number, whole
from edgepipe.deploy.output import add_format, print_json

_DEADLINE = number("a positive number of seconds, at most 86400", above=0, at_most=86400)
"""A day at most: past ~9e9 s the deadline no longer fits the clock's type (OverflowError)."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="why media or text fails to decode: magic bytes, truncation, PyAV decode, encoding",
        description="Diagnose files (folders are walked, hidden names skipped): the first bytes "
        "against the extension, a file cut short (JPEG end marker, PNG IEND, MP4 moov, Matroska "
        "size), whether PyAV decodes the first frames and with which decoders, sizes against the "
        "memory budget, and for text the likely encoding and where UTF-8 fails. Each problem says "
        "what to do.",
        allow_abbrev=False,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    p.add_argument("--frames", type=whole(1), default=8, metavar="N",
                   help="video frames to decode from the start (default 8)")  # fmt: skip
    p.add_argument("--timeout-s", type=_DEADLINE, default=20.0, metavar="S",
                   help="the decoder's deadline per file in seconds (default 20, at most 86400)")  # fmt: skip
    p.add_argument("--debug", action="store_true", help="full tracebacks")
    add_format(p)


def main(args: argparse.Namespace) -> int:
    from edgepipe.deploy.doctor.diagnose import diagnose, walk
    from edgepipe.deploy.output import progress
    from edgepipe.deploy.quoting import shown

    files, missing = walk(args.paths)
    for name in missing:
        error(f"{shown(name)}: no such file or folder (check the path)")
    records = []
    with progress("doctor", len(files)) as bar:
        for path in files:
            try:
                records.append(diagnose(path, frames=args.frames, timeout_s=args.timeout_s))
            except OSError as exc:  # unreadable: a permission, a file gone while walking
                from edgepipe.deploy.doctor.report import Diagnosis

                diag = Diagnosis(str(path), "unknown", None, 0)
                diag.add(
                    f"cannot read it: {exc.strerror or exc}", "check its permissions and that it still exists"
                )
                records.append(diag)
            bar.advance(bar.task_ids[0])
    failing = [r for r in records if r.problems]
    unchecked = [r for r in records if r.unchecked]
    if args.format == "json":
        print_json({"files": [r.as_dict() for r in records], "missing": missing,
                    "with_problems": len(failing), "not_checked": len(unchecked)})  # fmt: skip
    else:
        for record in records:
            print("\n".join(_lines(record)))
        print(f"doctor: {len(failing)} of {len(records)} files with problems"
              + (f"; {len(unchecked)} not checked in time" if unchecked else "")
              + (f"; {len(missing)} paths not found" if missing else ""))  # fmt: skip
    if unchecked:
        names = ", ".join(shown(r.path) for r in unchecked[:3]) + (", ..." if len(unchecked) > 3 else "")
        error(f"{len(unchecked)} file{'s' if len(unchecked) > 1 else ''} not checked in time ({names}): "
              f"the decoder passed --timeout-s {args.timeout_s:g}; raise it")  # fmt: skip
    if missing:
        return EXIT_USAGE
    return EXIT_PROBLEMS if failing or unchecked else EXIT_OK


def _lines(record: Any) -> list[str]:
    from edgepipe.deploy.doctor.magic import NAMES
    from edgepipe.deploy.quoting import shown

    details = record.details
    facts = [NAMES.get(record.kind, record.kind), f"{record.size_bytes} bytes"]
    decode = details.get("decode") or {}
    if decode.get("codec"):
        shape = [decode["codec"], decode.get("pix_fmt"), f"{decode.get('width')}x{decode.get('height')}"]
        facts.append(" ".join(str(s) for s in shape if s))
        if decode.get("frames"):
            facts.append(f"decoded {decode['frames']} frame{'s' if decode['frames'] > 1 else ''}")
    if "encoding" in details:
        facts.append(details["encoding_name"])
    fragments = details.get("fragments")
    if fragments and "whole_s" in fragments:  # a fragmented MP4: a killed writer leaves no index at the end
        end = "" if fragments["finished"] else ", no index at its end (its writer was killed or still writes)"
        facts.append(f"{fragments['whole']} whole fragments ({fragments['whole_s']:g} s){end}")
    verdict = "" if record.problems else f": {record.unchecked}" if record.unchecked else ": ok"
    lines = [f"{shown(record.path)}: {', '.join(facts)}{verdict}"]
    decoders = details.get("decoders")
    if decoders and decoders["software"]:
        hardware = ", ".join(decoders["hardware"]) or "none"
        lines.append(
            f"  decoders: {decoders['software']} (software); hardware in this build, untried: {hardware}"
        )
    for problem in record.problems:
        lines += [f"  problem: {problem.what}", f"  fix: {problem.fix}"]
    if record.problems and record.unchecked:
        lines.append(f"  {record.unchecked}")
    return lines
