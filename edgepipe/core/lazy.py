"""Names a package exports but loads on first use: :func:`lazy_exports`.

A package whose classes need heavy libraries (PyAV, aiortc, an MQTT client) keeps ``import
edgepipe.x`` quick by importing each class's module only when the name is first read::

    __getattr__, __dir__ = lazy_exports(__name__, {"MqttSink": "edgepipe.sinks.mqtt.sink"})

The value found is stored in the package's namespace, so the module is looked up once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``) for
    the names in ``homes`` (name -> the module that defines it). ``__getattr__`` raises
    ``AttributeError`` for any other name, as a module without one would."""
    homes = dict(homes)

    def load(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)  # found once: later reads do not come here
        return value

    def names() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return load, names


__all__ = ["lazy_exports"]
