"""``edgepipe probe``: which video decoders work here, each tried on a small generated clip
(see :mod:`edgepipe.media.probe`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from edgepipe.cli.exits import EXIT_OK, EXIT_USAGE
from edgepipe.cli.failures import error


def add_parser(sub: Any) -> None:
    probe_p = sub.add_parser(
        "probe",
        help="which video decoders work here (decodes a small clip with each)",
        description="Try every hardware and software decoder of each codec on a small generated clip.",
        allow_abbrev=False,
    )
    probe_p.add_argument(
        "--codec", action="append", help="only this codec (repeatable): h264, hevc, vp9, av1, mjpeg"
    )
    probe_p.add_argument("--format", choices=("text", "json"), default="text")


def main(args: argparse.Namespace) -> int:
    from edgepipe.media.probe import TRIAL_ENCODERS, probe

    codecs = tuple(args.codec or TRIAL_ENCODERS)
    unknown = [c for c in codecs if c not in TRIAL_ENCODERS]
    if unknown:
        error(f"unknown codec {unknown[0]!r}; use: {', '.join(TRIAL_ENCODERS)}")
        return EXIT_USAGE
    trials = probe(codecs)
    if args.format == "json":
        print(
            json.dumps([t.__dict__ if hasattr(t, "__dict__") else _trial_dict(t) for t in trials], indent=2)
        )
        return EXIT_OK
    print(f"{'codec':<6} {'decoder':<16} {'kind':<8} {'works here':<10} {'ms':>6}  detail")
    for t in trials:
        kind = "hardware" if t.hardware else "software"
        works = "yes" if t.works else "no"
        print(f"{t.codec:<6} {t.decoder:<16} {kind:<8} {works:<10} {t.ms:>6.1f}  {t.reason}")
    hardware = [t.decoder for t in trials if t.works and t.hardware]
    summary = ": " + ", ".join(hardware) if hardware else "; video is decoded in software"
    print(f"\n{len(hardware)} hardware decoder(s) work here{summary}")
    return EXIT_OK


def _trial_dict(t: Any) -> dict[str, Any]:
    return {f: getattr(t, f) for f in t.__slots__}
