from __future__ import annotations

import logging

import pytest

from edgepipe.media.status import SourceStatus


def test_a_state_is_entered_once_unless_there_is_a_new_reason() -> None:
    status = SourceStatus("cam")
    assert status.state_info == ("idle", "")
    status.decoded = 7
    assert status.set_state("connecting") is True
    assert status.set_state("connecting") is False
    assert status.set_state("connecting", "no answer within 5 s") is True
    assert status.state_info == ("connecting", "no answer within 5 s")
    assert status.gauges == {"decoded": 7}  # the counters go with every state change


def test_gauges_carry_only_the_counters_that_happened() -> None:
    status = SourceStatus("cam")
    status.decoded, status.corrupt = 30, 2
    status.update_gauges()
    assert status.gauges == {"decoded": 30, "corrupt": 2}
    status.dropped, status.reconnects = 4, 1
    status.update_gauges()
    assert status.gauges == {"decoded": 30, "corrupt": 2, "pool_drops": 4, "reconnects": 1}


def test_the_decoder_is_told_once_per_change_and_a_software_fallback_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    status = SourceStatus("cam")
    with caplog.at_level(logging.INFO, logger="edgepipe.media.status"):
        status.note_decoder("h264+cuda", "h264+cuda decodes h264 here")
        status.note_decoder("h264+cuda", "h264+cuda decodes h264 here")
        status.note_decoder("h264 (software)", "h264+cuda cannot decode here: no device")
    assert status.decoder_used == status.gauges["decoder"] == "h264 (software)"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "[cam] decoding with h264+cuda"),
        (logging.WARNING, "[cam] decoding h264 (software): h264+cuda cannot decode here: no device"),
    ]


def test_no_hardware_decoder_on_the_machine_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    from edgepipe.media.probe import choose

    _, why = choose("h264")  # this machine's own answer: on a CPU-only box, none works
    status = SourceStatus("cam")
    long_why = (
        "no hardware decoder works here (h264_cuvid: no device; h264+vaapi: no /dev/dri; h264_qsv: ...)"
    )
    with caplog.at_level(logging.DEBUG, logger="edgepipe.media.status"):
        status.note_decoder("h264 (software)", long_why)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.INFO,
            "[cam] decoding h264 (software): no hardware decoder on this machine (edgepipe probe says why)",
        ),
        (logging.DEBUG, f"[cam] {long_why}"),  # the details, with --debug
    ]
    assert why.startswith("no hardware decoder works here") or "decodes h264 here" in why
