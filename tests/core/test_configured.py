from __future__ import annotations

import dataclasses
import inspect
from dataclasses import KW_ONLY, dataclass, field

import pytest

from edgepipe.core.configured import configured, keywords


@dataclass(frozen=True, slots=True)
class LampConfig:
    name: str
    _: KW_ONLY
    watts: int = 5
    """Its power."""
    label: str = field(init=False)

    def __post_init__(self) -> None:
        if self.watts < 1:
            raise ValueError(f"watts must be at least 1, got {self.watts}")
        object.__setattr__(self, "label", f"{self.name} ({self.watts} W)")


class Lamp:
    made = 0

    @configured(LampConfig)
    def __init__(self, config: LampConfig) -> None:
        """A lamp of ``config``."""
        Lamp.made += 1
        self.config = config


def test_a_node_takes_its_configs_fields_and_holds_the_config() -> None:
    lamp = Lamp("desk", watts=7)
    assert lamp.config == LampConfig("desk", watts=7)
    assert lamp.config.label == "desk (7 W)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        lamp.config.watts = 9  # type: ignore[misc]


def test_a_setting_that_cannot_work_is_refused_before_the_node_is_made() -> None:
    made = Lamp.made
    with pytest.raises(ValueError, match="watts must be at least 1, got 0"):
        Lamp("desk", watts=0)
    with pytest.raises(TypeError):
        Lamp("desk", 7)  # type: ignore[misc]  # keyword-only, as the config says
    assert Lamp.made == made


def test_the_signature_is_the_configs_one_list_of_fields() -> None:
    parameters = inspect.signature(Lamp).parameters
    assert list(parameters) == ["name", "watts"]
    assert parameters["watts"].default == 5
    assert parameters["watts"].kind is inspect.Parameter.KEYWORD_ONLY
    assert Lamp.__init__.__doc__ == "A lamp of ``config``."


def test_keywords_build_the_config_again() -> None:
    config = LampConfig("hall", watts=3)
    assert keywords(config) == {"name": "hall", "watts": 3}  # not the derived label
    assert Lamp(**keywords(config)).config == config
