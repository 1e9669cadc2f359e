"""The headroom benchmark's own choices (scripts/bench/headroom/bench.py): its flags, its order
of runs, its target CPU."""

from __future__ import annotations

from scripts.bench.headroom.bench import ORDER, TARGETS, headroom_target, supported
from scripts.bench.headroom.figures import ratio


def test_flags_are_detected_in_the_help_and_give_the_target() -> None:
    help_text = "  --headroom FRAC  keep this share free\n  --no-governor-x  other\n"
    assert supported(("--headroom", "0.3"), help_text)
    assert not supported(("--no-governor",), help_text)
    assert supported((), help_text)
    assert headroom_target(("--headroom", "0.25")) == 0.75
    assert headroom_target(("--no-governor",)) == 0.7
    assert ratio(1.0, 2.0) == 0.5
    assert ratio(1.0, 0.0) is None
    assert ratio(None, 2.0) is None
    # Three governed runs around the ungoverned one: a drift of the machine hits both kinds.
    assert ORDER == ("governed", "ungoverned", "governed", "governed")
    assert TARGETS.cameras == 4
