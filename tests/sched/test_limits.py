"""Which limit holds a model node: input, budget, gate or model."""

from __future__ import annotations

from edgepipe.sched.limits import Totals, Window, binding


def window(offered: int = 30, lost: int = 0, waited_s: float = 0.0) -> Window:
    return Window(seconds=1.0, offered=offered, lost=lost, waited_s=waited_s)


def test_a_node_that_handles_what_it_is_given_is_held_by_its_input() -> None:
    assert binding(window(lost=0), cpu=0.95, target=0.7, level=3) == "input"
    assert binding(window(offered=0), cpu=None, target=0.7, level=0) == "input"
    assert binding(window(offered=100, lost=2), cpu=0.4, target=0.7, level=0) == "input", "jitter"


def test_a_node_behind_at_the_cpu_target_or_shed_by_the_governor_is_held_by_the_budget() -> None:
    assert binding(window(lost=10), cpu=0.69, target=0.7, level=0) == "budget"
    assert binding(window(lost=10), cpu=0.4, target=0.7, level=1) == "budget"


def test_a_node_behind_that_waited_at_the_gate_is_held_by_the_gate() -> None:
    assert binding(window(lost=10, waited_s=0.2), cpu=0.5, target=0.7, level=0) == "gate"
    assert binding(window(lost=10, waited_s=0.05), cpu=0.5, target=0.7, level=0) == "model"


def test_a_node_behind_with_cpu_to_spare_and_no_wait_is_held_by_its_model() -> None:
    assert binding(window(lost=15), cpu=0.45, target=0.7, level=0) == "model"
    assert binding(window(lost=15), cpu=None, target=0.7, level=0) == "model"
    assert binding(window(lost=15), cpu=0.99, target=float("inf"), level=0) == "model", "ungoverned"


def test_a_window_is_the_difference_of_two_totals() -> None:
    w = Totals(10.0, 100, 5, 0.5).window(Totals(11.5, 130, 20, 0.75))
    assert w == Window(1.5, 30, 15, 0.25)
