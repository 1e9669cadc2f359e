"""What a person sees on the viewer page: its own latency figures, read from headless Chromium.

The page (``edgepipe/serve/static/tile.js``) times each frame it shows: capture→display (the
frame's capture time, from its results' ``t_ms``, to when the browser expects it on screen),
the pipeline's latency of those results, and the browser's own share (from the frame's last
packet received to its display). :func:`watch` opens the page, waits until the first tile
plays with results, lets ``warmup_s`` pass, then collects every frame's figures for
``seconds`` (the page keeps its last few hundred; they are read every second or two and
only the new ones taken), with the browser's receive stats (jitter buffer, decode) of each
second.

    python -m scripts.bench.webrtc.browser http://127.0.0.1:8080/ --seconds 20
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.bench.headroom.figures import percentile, ratio
from scripts.webdriver import Browser, missing

READ_EVERY_S = 1.5
"""The page keeps its last 300 frames' figures (10 s at 30 fps): read well within that."""
PLAYING = (
    "const s = window.edgepipeViewer; const t = s && Object.values(s.sources)[0];"
    "return !!t && t.video === 'playing' && t.captureToDisplayMs !== null && t.framesPresented > 10;"
)
TILE = "const s = window.edgepipeViewer; return s && Object.values(s.sources)[0];"


def _rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def summary(
    frames: dict[str, list[float | None]], receiver: dict[str, list[float]], span_s: float
) -> dict[str, Any]:
    """The figures of the frames shown (per-frame lists, None where a frame had no figure) and
    of the per-second receiver samples, over ``span_s`` seconds."""
    out: dict[str, Any] = {"measured_s": round(span_s, 1), "frames": len(frames["captureToDisplayMs"])}
    out["fps"] = round(out["frames"] / span_s, 1) if span_s > 0 else None
    for key, name in (("captureToDisplayMs", "capture_to_display"), ("pipelineLatencyMs", "pipeline_latency"),
                      ("browserMs", "in_browser")):  # fmt: skip
        values = [v for v in frames[key] if v is not None]
        out[f"{name}_p50_ms"] = _rounded(percentile(values, 50))
        out[f"{name}_p95_ms"] = _rounded(percentile(values, 95))
    out["timed_share"] = (
        round(sum(v is not None for v in frames["captureToDisplayMs"]) / out["frames"], 3)
        if out["frames"]
        else 0.0
    )
    for key, name in (("jitterBufferMs", "jitter_buffer_ms"), ("decodeMs", "decode_ms")):
        values = receiver[key]
        out[name] = _rounded(sum(values) / len(values)) if values else None
    return out


def describe(seen: dict[str, Any]) -> str:
    """One line of :func:`watch`'s figures (with the run's ``pipeline``)."""
    extra = ratio(seen["capture_to_display_p95_ms"], seen["pipeline_latency_p95_ms"])
    return (
        f"browser ({seen.get('pipeline', 'page')}, {seen['fps']} fps shown): capture→display p50/p95 "
        f"{seen['capture_to_display_p50_ms']}/{seen['capture_to_display_p95_ms']} ms; the pipeline's "
        f"{seen['pipeline_latency_p50_ms']}/{seen['pipeline_latency_p95_ms']} ms (p95 ratio {extra}); in the "
        f"browser {seen['in_browser_p50_ms']}/{seen['in_browser_p95_ms']} ms (jitter buffer "
        f"{seen['jitter_buffer_ms']} ms, decode {seen['decode_ms']} ms)"
    )


def watch(url: str, seconds: float, warmup_s: float = 3.0, profile: Path | None = None,
          start_timeout_s: float = 60.0) -> dict[str, Any]:  # fmt: skip
    """The page at ``url`` in headless Chromium: its first tile's figures over ``seconds``
    (see the module docstring). Raises RuntimeError when it does not play in time."""
    origin = url.split("/?")[0].rstrip("/")
    with tempfile.TemporaryDirectory(prefix="viewer-chromium-") as tmp, \
            Browser.start(profile or Path(tmp)) as browser:  # fmt: skip
        browser.grant_media(f"{origin}/health")  # ICE on 127.0.0.1 (see Browser.grant_media)
        browser.get(url)
        if not browser.wait_for(PLAYING, start_timeout_s):
            state = json.dumps(browser.script("return window.edgepipeViewer"))[:400]
            raise RuntimeError(f"{url}: the page did not play with results in {start_timeout_s:g} s: {state}")
        time.sleep(warmup_s)
        frames: dict[str, list[float | None]] = {
            k: [] for k in ("captureToDisplayMs", "pipelineLatencyMs", "browserMs")
        }
        receiver: dict[str, list[float]] = {"jitterBufferMs": [], "decodeMs": []}
        seen = browser.script(TILE)["framesPresented"]
        t0 = time.monotonic()
        while (now := time.monotonic()) < t0 + seconds:
            time.sleep(min(READ_EVERY_S, t0 + seconds - now))
            tile = browser.script(TILE)
            new = tile["framesPresented"] - seen
            seen = tile["framesPresented"]
            for key, values in frames.items():
                values.extend(tile["recent"][key][-new:] if new > 0 else [])
            for key, values in receiver.items():
                if tile[key] is not None:
                    values.append(tile[key])
        return summary(frames, receiver, time.monotonic() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the viewer page, e.g. http://127.0.0.1:8080/")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured span (default 20)")
    parser.add_argument("--warmup", type=float, default=3.0, help="left out after it plays (default 3)")
    args = parser.parse_args()
    if (reason := missing()) is not None:
        print(f"browser: {reason}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(watch(args.url, args.seconds, args.warmup)))
    except (RuntimeError, OSError) as exc:
        print(f"browser: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
