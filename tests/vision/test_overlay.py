from __future__ import annotations

import numpy as np
import pytest
import skimage.data

from edgepipe.media.frame import from_rgb
from edgepipe.vision.detection import Detection, Detections
from edgepipe.vision.overlay import Annotate, Redact

FACE = (183.0, 68.0, 265.0, 172.0)


def detections(with_frame: bool = True) -> Detections:
    frame = from_rgb(skimage.data.astronaut())
    result = Detections("image", 0, None, None, 512, 512, "m", [Detection(FACE, 0.9, 0, "face", track_id=4)])
    if with_frame:
        result.frame = frame
    return result


def test_redact_pixelates_the_face_and_leaves_the_rest() -> None:
    result = detections()
    assert result.frame is not None
    original = result.frame.y.copy()
    out = Redact(margin=0.0).process(result)
    x1, y1, x2, y2 = (int(v) for v in FACE)
    before, after = original[y1:y2, x1:x2].astype(float), out.y[y1:y2, x1:x2].astype(float)
    # Pixelated: neighbouring pixels inside a block are equal, so the fine detail is gone.
    assert np.abs(np.diff(after, axis=1)).mean() < 0.3 * np.abs(np.diff(before, axis=1)).mean()
    np.testing.assert_array_equal(out.y[300:], original[300:])
    np.testing.assert_array_equal(result.frame.y, original)  # the source frame is untouched


def test_annotate_draws_boxes() -> None:
    result = detections()
    assert result.frame is not None
    out = Annotate().process(result)
    assert not np.array_equal(out.y[68:70, 183:265], result.frame.y[68:70, 183:265])


def test_without_the_frame_the_error_says_how_to_keep_it() -> None:
    with pytest.raises(ValueError, match="keep_frame=True"):
        Redact().process(detections(with_frame=False))


def test_a_box_the_tracker_predicted_is_blurred_wider() -> None:
    # Between model runs (--every N) a face may have moved off the tracker's prediction.
    def pixelated_rows(inferred: bool) -> int:
        result = detections()
        result.inferred = inferred
        assert result.frame is not None
        original = result.frame.y.copy()
        out = Redact().process(result)
        return int((np.abs(out.y.astype(int) - original).max(axis=1) > 0).sum())

    assert pixelated_rows(inferred=False) > pixelated_rows(inferred=True) * 1.2


@pytest.mark.parametrize("margins", [(-0.1, 0.35), (0.15, float("nan")), (0.15, 11.0)])
def test_redact_refuses_margins_that_make_no_sense(margins: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="margins"):
        Redact(margin=margins[0], predicted_margin=margins[1])
