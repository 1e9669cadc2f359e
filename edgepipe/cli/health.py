"""``edgepipe health FILE``: exit 0 while a running pipeline's heartbeat file is fresh, for a
container's HEALTHCHECK (see :mod:`edgepipe.runtime.heartbeat`)."""

from __future__ import annotations

import argparse
from typing import Any

from edgepipe.cli.exits import EXIT_FAILED, EXIT_OK
from edgepipe.cli.failures import say
from edgepipe.core.units import seconds


def add_parser(sub: Any) -> None:
    health_p = sub.add_parser(
        "health",
        help="exit 0 if a running pipeline's heartbeat file is fresh (for HEALTHCHECK)",
        allow_abbrev=False,
    )
    health_p.add_argument("file", metavar="PATH")
    health_p.add_argument("--max-age", type=seconds(above=0), default=30.0, metavar="SECONDS",
                          help="the heartbeat may be this old (default 30)")  # fmt: skip
    health_p.add_argument("--max-idle", type=seconds(above=0), metavar="SECONDS",
                          help="fail when no item moved for this long (default: the slowest source's "
                          "frame interval + 5 s)")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from edgepipe.runtime.heartbeat import check

    healthy, reason = check(args.file, args.max_age, args.max_idle)
    if not healthy:
        say(reason)
        return EXIT_FAILED
    print(reason)
    return EXIT_OK
