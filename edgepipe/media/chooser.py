"""Which decoder opens a source's input: hardware where it works here, software otherwise.

The input is opened in software first: that tells the codec, and it is the fallback anyway.
``decoder="auto"`` then takes what :func:`~edgepipe.media.probe.choose` found working for that
codec (a trial decode, remembered for the life of the process). A decoder asked for by name is
tried on a small clip first. A hardware decoder that cannot open the input falls back to
software, and says why.

A hardware decoder that passed the trial clip may still fail on the real stream (10-bit HEVC,
4:4:4): :meth:`DecoderChooser.failover` replaces it in the open input with the next candidate
that works here (software last), and the source keeps that choice when it reopens the input.
"""

from __future__ import annotations

from typing import NamedTuple

from edgepipe.media import hw
from edgepipe.media.decode import StreamDecoder
from edgepipe.media.errors import DecoderError
from edgepipe.media.probe import choose, try_decoder
from edgepipe.media.url import SourceURL


class Opened(NamedTuple):
    """An open input and what decodes it."""

    decoder: StreamDecoder
    label: str
    """``h264+cuda``, ``h264_v4l2m2m``, ``h264 (software)`` …"""
    why: str
    """Why this decoder: the reason for a fallback to software, or empty."""
    hardware: bool = False
    """Whether it decodes on hardware, which may fail on the stream (see :meth:`~DecoderChooser.failover`)."""


class DecoderChooser:
    """Opens ``src`` with the decoder ``decoder`` names (``auto``, ``software``, a hwaccel device
    type or a decoder name). Used from one thread at a time (start-up, then the decode thread)."""

    def __init__(
        self,
        src: SourceURL,
        decoder: str = "auto",
        *,
        timeout_s: float = 5.0,
        rtsp_transport: str = "tcp",
        options: dict[str, str] | None = None,
    ) -> None:
        self.src = src
        self.decoder = decoder
        self.timeout_s = timeout_s
        self.rtsp_transport = rtsp_transport
        self.options = dict(options or {})
        self._prepared: StreamDecoder | None = None
        self._rejected: set[str] = set()
        """Labels of the decoders that failed on this input: never chosen again for it."""
        self._settled: hw.DecoderChoice | None = None
        """What a failover switched to: used from then on, reopens included."""

    def _stream_decoder(self, choice: hw.DecoderChoice | None = None) -> StreamDecoder:
        return StreamDecoder(self.src, choice=choice, timeout_s=self.timeout_s,
                             rtsp_transport=self.rtsp_transport, options=self.options)  # fmt: skip

    def prepare(self) -> None:
        """Open the input in software now, so that a bad file fails with its name at start-up,
        before anything runs; the next :meth:`open` starts from this open input instead of
        opening it again. Blocks (up to ``timeout_s``); raises :class:`SourceError`."""
        decoder = self._stream_decoder()
        decoder.open()
        self._prepared = decoder

    def discard(self) -> None:
        """Close what :meth:`prepare` opened if no :meth:`open` took it."""
        if self._prepared is not None:
            self._prepared.close()
            self._prepared = None

    def open(self) -> Opened:
        """Open the input with the chosen decoder; the caller closes ``Opened.decoder``. Blocks
        (each open up to ``timeout_s``); raises :class:`SourceError` (retryable where trying
        again can help)."""
        software, self._prepared = self._prepared, None
        if software is None:
            software = self._stream_decoder()
            software.open()  # first in software: it tells the codec, and it is the fallback anyway
        codec = software.codec
        software_label = f"{codec} (software)"
        settled = self._settled if self._settled is not None and self._settled.codec == codec else None
        if settled is not None:
            choice, why = settled, "chosen when the first decoder failed on this stream"
        elif self.decoder == "auto":
            choice, why = choose(codec)
        else:
            choice, why = hw.parse_choice(codec, self.decoder) or hw.DecoderChoice(codec), "as configured"
        if choice.is_hardware and choice.label in self._rejected:
            choice, why = hw.DecoderChoice(codec), f"{choice.label} failed on this stream"
        if not choice.is_hardware:
            return Opened(software, software_label, why if self.decoder == "auto" or settled else "")
        if self.decoder != "auto" and settled is None:
            # An asked-for decoder is tried on a small clip first: some fail only at the first
            # packet (a CUDA decoder without a GPU), which would otherwise look like corruption.
            trial = try_decoder(codec, choice)
            if not trial.works:
                reason = f"{choice.label} cannot decode {codec} here: {trial.reason}"
                return Opened(software, software_label, reason)
        software.close()
        hardware = self._stream_decoder(choice)
        try:
            hardware.open()
        except DecoderError as exc:
            software.open()
            return Opened(software, software_label, str(exc))
        return Opened(hardware, choice.label, why, hardware=True)

    def failover(self, decoder: StreamDecoder) -> Opened | None:
        """Replace the hardware decoder of the open ``decoder``, which failed on this stream,
        with the next candidate that decodes the trial clip here (software last); None when
        it was not a hardware decoder (nothing to fall back to). The failed one is not used
        for this input again. Blocks for the trials (milliseconds each)."""
        current = decoder.choice
        if current is None or not current.is_hardware:
            return None
        codec = decoder.codec
        self._rejected.add(current.label)
        for choice in self._next_choices(codec, current):
            if choice.is_hardware and not try_decoder(codec, choice).works:
                self._rejected.add(choice.label)
                continue
            try:
                decoder.switch(choice)
            except DecoderError:
                self._rejected.add(choice.label)
                continue
            self._settled = choice
            return Opened(decoder, choice.label, "", hardware=choice.is_hardware)
        return None

    def _next_choices(self, codec: str, current: hw.DecoderChoice) -> list[hw.DecoderChoice]:
        """The candidates after ``current`` in order of preference, not yet failed; software last."""
        order = hw.candidates(codec)
        if current in order:
            order = order[order.index(current) + 1 :]
        return [c for c in order if c.label not in self._rejected] + [hw.DecoderChoice(codec)]
