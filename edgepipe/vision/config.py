"""What a :class:`~edgepipe.vision.Detector` is asked to do: :class:`DetectorConfig`, each setting
checked when it is made (a detector that cannot work is refused at declaration, before a camera
opens). ``Detector(model, every=3, ...)`` builds one from its keywords
(:func:`~edgepipe.core.configured.configured`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Literal

from edgepipe.core.checks import Range
from edgepipe.infer import SessionConfig
from edgepipe.infer.registry import looks_like_path, lookup
from edgepipe.media.tensor import Method
from edgepipe.vision import adapters
from edgepipe.vision.model import check_model_file
from edgepipe.vision.preprocess import Normalize

DEFAULT_SESSION = SessionConfig(timeout_s=2.0)
"""A detector's session unless it is given one: a run past 2 s is a frame lost, not a wait."""


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """A detector's settings (see :mod:`edgepipe.vision.detector`). Raises ``ValueError`` naming
    the setting for a value that cannot work."""

    model: str = "centerface"
    """Registry name (``edgepipe models list``) or path to an ``.onnx`` file (a copy of a registry
    model is read as the registry's; another as its metadata says, :mod:`edgepipe.infer.metadata`).
    A file whose input cannot be fed is refused here; one not there yet, when the node starts."""
    _: KW_ONLY
    adapter: str = "auto"
    """Output decoder (``centerface``, ``yolov5``, ``yolov8``, ``yolo-nms``, ``ssd``) or ``auto``
    (chosen from the outputs of a first run)."""
    labels: Sequence[str] | None = None
    """Class names by index (default: the registry's or the model's metadata, COCO's for 80-class
    YOLO); kept as a tuple."""
    classes: Collection[str] | None = None
    """Keep only these labels (None or empty: all); kept as a frozenset."""
    score_threshold: float | None = None
    """Lowest score kept, in [0, 1] (None: the adapter's default)."""
    iou_threshold: float | None = None
    """Overlap above which NMS keeps only the better box, in [0, 1] (None: the adapter's default)."""
    max_detections: int = 100
    """Boxes kept per frame at most (the best scores)."""
    input_size: int = 640
    """Longest side of the input for models that take any size (fixed-size models use their
    own), in [32, 4096], rounded up to a multiple of 32; smaller frames keep their size."""
    every: int = 1
    """Run the model on one frame in ``every`` per source; the tracker fills the rest."""
    track: bool | None = None
    """Assign track ids (None: when ``every`` > 1). False with ``every`` > 1 is refused: the
    tracker carries the boxes between model runs."""
    normalize: Normalize | None = None
    """Pixel (0..255) to model value (None: the adapter's, else 0..1 RGB)."""
    box_format: adapters.BoxFormat = "yxyx_norm"
    """How an SSD model's boxes are written (see :func:`~edgepipe.vision.adapters.decode`)."""
    session: SessionConfig | None = None
    """Providers, threads, run deadline (``timeout_s``), optimization (None:
    :data:`DEFAULT_SESSION`)."""
    preprocess: Method = "auto"
    """How frames become input tensors (:mod:`edgepipe.media.tensor`)."""
    keep_frame: bool = False
    """The results carry the frame (and its lease) for overlays downstream."""
    batch_size: int = 1
    """Run up to this many waiting frames (several cameras into one inbox) through the model at
    once, for models whose batch dimension is free; 1 runs them one by one."""
    pin_every: bool = False
    """The governor never raises the interval above ``every`` (it thins the frames before this
    node instead)."""
    keep_up: bool | None = None
    """On live input (``latest`` lanes), raise the interval so that every frame gets boxes (the
    tracker's between model runs) when the model cannot run on each
    (:mod:`edgepipe.vision.keepup`), each camera's at its rhythm. None: with two live streams or
    more; one stream keeps the model on the newest frame."""
    instances: int | Literal["auto"] = "auto"
    """Model runs in flight at once, one intra-op thread each (``"auto"``: the CPU budget's units,
    2 on 2 cores; 1 ungoverned)."""
    prefer: Literal["throughput", "latency"] = "throughput"
    """``"throughput"`` or ``"latency"`` (one run at a time on every thread the budget allows:
    about half the wait for a result, 15-20% more CPU a run beside other work)."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"every must be at least 1, got {self.every}")
        for name, value, allowed in (("input_size", self.input_size, Range(32, 4096)),
                                     ("score_threshold", self.score_threshold, Range(0, 1)),
                                     ("iou_threshold", self.iou_threshold, Range(0, 1)),
                                     ("max_detections", self.max_detections, Range(1))):  # fmt: skip
            try:
                allowed.check(value)
            except ValueError as exc:
                raise ValueError(f"{name} must be {exc}, got {value!r}") from None
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        instances = self.instances
        if instances != "auto" and (
            isinstance(instances, bool) or not isinstance(instances, int) or instances < 1
        ):
            raise ValueError(f"instances must be a count of at least 1 or 'auto', got {instances!r}")
        if self.prefer not in ("throughput", "latency"):
            raise ValueError(f"prefer must be 'throughput' or 'latency', got {self.prefer!r}")
        if self.prefer == "latency" and instances not in ("auto", 1):
            raise ValueError(f"prefer='latency' runs one call at a time; instances={instances} asks for "
                             "several: drop one of them")  # fmt: skip
        if self.every > 1 and self.track is False:
            raise ValueError(
                "every > 1 needs the tracker (track=True): it carries the boxes between model runs"
            )
        if self.adapter != "auto" and self.adapter not in adapters.ADAPTERS:
            raise ValueError(
                f"unknown adapter {self.adapter!r}; use auto or one of {', '.join(adapters.ADAPTERS)}"
            )
        # Frozen all the way down: a list the caller keeps cannot change the detector's labels.
        object.__setattr__(self, "model", str(self.model))
        if not looks_like_path(self.model):
            lookup(self.model)  # a name the registry has not: wrong before anything runs (ModelNotFound)
        else:  # a file the detector cannot feed, as well
            check_model_file(self.model, self.session_config.free_image_dims)
        if self.labels is not None:
            object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "classes", frozenset(self.classes) if self.classes else None)

    @property
    def session_config(self) -> SessionConfig:
        """The session's settings: :attr:`session`, or :data:`DEFAULT_SESSION`."""
        return self.session or DEFAULT_SESSION

    @property
    def track_ids(self) -> bool:
        """Results carry track ids: :attr:`track`, or ``every`` > 1 when it is not said."""
        return self.every > 1 if self.track is None else self.track

    @property
    def may_track(self) -> bool:
        """The tracker may carry boxes over frames the model skips (``track`` is not False): the
        governor may raise the interval."""
        return self.track is not False

    @property
    def instances_asked(self) -> int | Literal["auto"]:
        """The calls in flight to ask the runtime for: ``instances``, one when preferring latency."""
        return 1 if self.prefer == "latency" else self.instances


__all__ = ["DEFAULT_SESSION", "DetectorConfig"]
