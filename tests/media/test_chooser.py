from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edgepipe.media import chooser as chooser_module
from edgepipe.media.chooser import DecoderChooser, Opened
from edgepipe.media.errors import SourceError
from edgepipe.media.hw import DecoderChoice
from edgepipe.media.probe import Trial
from edgepipe.media.url import parse


def _open(url: Path, decoder: str) -> Opened:
    opened = DecoderChooser(parse(str(url)), decoder).open()
    opened.decoder.close()
    return opened


def test_software_as_asked_says_nothing_more(clip: Path) -> None:
    opened = _open(clip, "software")
    assert (opened.label, opened.why) == ("h264 (software)", "")


def test_auto_with_no_working_hardware_decodes_in_software_and_says_why(
    clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chooser_module, "choose", lambda codec: (DecoderChoice(codec), "none works here"))
    opened = _open(clip, "auto")
    assert (opened.label, opened.why) == ("h264 (software)", "none works here")


def test_a_named_decoder_that_fails_its_trial_falls_back_to_software(
    clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def trial(codec: str, choice: DecoderChoice) -> Trial:
        return Trial(codec, choice.label, True, False, 0, 1.0, "no device")

    monkeypatch.setattr(chooser_module, "try_decoder", trial)
    opened = _open(clip, "h264_madeup")
    assert (opened.label, opened.why) == ("h264 (software)", "h264_madeup cannot decode h264 here: no device")


def test_a_hardware_decoder_that_cannot_open_falls_back_to_software_with_its_error(
    clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def trial(codec: str, choice: DecoderChoice) -> Trial:
        return Trial(codec, choice.label, True, True, 8, 1.0, "nv12")  # passes, then fails to open

    monkeypatch.setattr(chooser_module, "try_decoder", trial)
    opened = _open(clip, "h264_madeup")
    assert opened.label == "h264 (software)"
    assert "decoder h264_madeup cannot open here" in opened.why


def test_a_prepared_input_is_the_one_opened_next_and_discard_closes_it(clip: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.mp4"
    shutil.copy(clip, copy)
    chooser = DecoderChooser(parse(str(copy)), "software")
    chooser.prepare()
    copy.unlink()  # the prepared input is open already: no second open of the file
    opened = chooser.open()
    assert opened.decoder.container is not None
    opened.decoder.close()
    shutil.copy(clip, copy)
    chooser.prepare()
    chooser.discard()
    copy.unlink()
    with pytest.raises(SourceError, match="no such file"):
        chooser.open()


def test_failover_takes_the_next_candidate_that_works_then_software_and_keeps_it_for_reopens(
    clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Candidates here, in order: FFmpeg's h264 decoder by name (it works: it stands for a
    # hardware decoder that failed on the stream), then two that fail their trial or their open.
    named = DecoderChoice("h264", decoder="h264")
    no_trial = DecoderChoice("h264", decoder="h264_notrial")
    no_open = DecoderChoice("h264", decoder="h264_noopen")
    monkeypatch.setattr(chooser_module.hw, "candidates", lambda codec: [named, no_trial, no_open])

    def trial(codec: str, choice: DecoderChoice) -> Trial:
        works = choice != no_trial
        return Trial(codec, choice.label, True, works, 8 * works, 1.0, "nv12" if works else "no device")

    monkeypatch.setattr(chooser_module, "try_decoder", trial)
    chooser = DecoderChooser(parse(str(clip)), "h264")
    opened = chooser.open()
    try:
        assert (opened.label, opened.hardware) == ("h264", True)
        replaced = chooser.failover(opened.decoder)
        assert replaced is not None
        assert (replaced.label, replaced.hardware) == ("h264 (software)", False)
        assert opened.decoder.choice == DecoderChoice("h264")
        assert chooser.failover(opened.decoder) is None  # software: nothing after it
    finally:
        opened.decoder.close()
    reopened = chooser.open()  # a reconnect: not the failed decoder again
    reopened.decoder.close()
    assert (reopened.label, reopened.hardware) == ("h264 (software)", False)
    assert reopened.why == "chosen when the first decoder failed on this stream"
