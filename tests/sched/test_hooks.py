from __future__ import annotations

from edgepipe.runtime.memory_plan import Plannable
from edgepipe.sched.hooks import Governable, KeepsUp, LoadsModel, loads_model
from edgepipe.sched.knobs import EveryKnob, PaceKnob
from edgepipe.vision import Detector
from edgepipe.vision.selection import ModelFrames


class Lamp:
    """A node with none of the features."""

    def process(self, item: int) -> int:
        return item


class Remote:
    """Says it may load a model, and does not (a Describe with a remote engine only)."""

    loads_model = False

    def governor_knobs(self, node_id: str, priority: int) -> list[PaceKnob]:
        return []


def test_a_node_has_the_features_it_declares_whatever_it_inherits() -> None:
    detector = Detector("centerface")
    assert all(isinstance(detector, hook) for hook in (LoadsModel, Governable, Plannable))
    assert loads_model(detector)
    assert not any(isinstance(Lamp(), hook) for hook in (LoadsModel, Governable, Plannable, KeepsUp))
    assert not loads_model(Lamp())
    assert not loads_model(print)
    assert isinstance(Remote(), LoadsModel)
    assert not loads_model(Remote())
    assert isinstance(Remote(), Governable)


def test_an_every_knob_says_when_its_target_keeps_up() -> None:
    frames = ModelFrames(2, None)
    assert isinstance(frames, KeepsUp)
    knob = EveryKnob("faces", 1, frames, 2)
    assert knob.describe() == "model on 1 frame in 2 per source"

    class Plain:
        every_now: float = 1.0

    assert EveryKnob("faces", 1, Plain(), 1).describe() == "model on 1 frame in 1 per source"
