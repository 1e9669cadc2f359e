"""What an ``edgepipe`` command's exit code means: one table for every command.

=====  ============  ===========================================================================
code   name          meaning
=====  ============  ===========================================================================
0      ``OK``        done; or stopped on request (SIGINT, SIGTERM, SIGHUP, ``--duration``, the
                     reader of ``--results -`` closing it) at any moment, even during start-up
1      ``FAILED``    something failed while it ran: a node stopped the run, an output failed as
                     a whole (a recording, ``--results``, an event clip lost), messages asked
                     for delivery were not delivered; for the deployment commands, problems
                     were found (a model that diverges, an operator not supported, a damaged
                     file)
2      ``USAGE``     found before anything ran: the command line, the pipeline file (including
                     one that exits at import), a parameter, an output that cannot be written,
                     a port in use, a missing optional package
=====  ============  ===========================================================================

A problem found before the graph runs is always 2, with one line on stderr naming the input and
what to do; 1 always comes with a line naming what failed. No code means "killed": SIGKILL is the
only stop that exits otherwise (137, from the shell), and what it can lose is documented per
output (a recording loses at most its last second).
"""

from __future__ import annotations

EXIT_OK = 0
"""Done, or stopped on request."""
EXIT_FAILED = 1
"""Failed while running (or, for a deployment command, problems found)."""
EXIT_PROBLEMS = EXIT_FAILED
"""The deployment commands' name for 1: the work was done and found problems."""
EXIT_USAGE = 2
"""Wrong before anything ran: the command line, a file, a parameter, an output, a port."""

TABLE: tuple[tuple[int, str, str], ...] = (
    (EXIT_OK, "OK", "done, or stopped on request (a signal, `--duration`) at any moment"),
    (EXIT_FAILED, "FAILED", "a node, an output or a delivery failed while running; problems found"),
    (EXIT_USAGE, "USAGE", "wrong before anything ran: command line, file, parameter, output, port"),
)
"""(code, name, meaning) for the README's table and ``scripts/check_exits.py``."""

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "TABLE"]
