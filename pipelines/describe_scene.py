"""Scene descriptions: what the detector saw in the last seconds, written by a language model.

    edgepipe run pipelines/describe_scene.py --model ./qwen2.5-0.5b-onnx --duration 30 --results -
    edgepipe run pipelines/describe_scene.py --source rtsp://192.0.2.10/stream --model ./qwen2.5-0.5b-onnx
    edgepipe run pipelines/describe_scene.py --model ./qwen2.5-0.5b-onnx --port 8080
    edgepipe run pipelines/describe_scene.py --model ./qwen2.5-0.5b-onnx --mqtt mqtt://127.0.0.1:1883
    edgepipe run pipelines/describe_scene.py --server http://192.0.2.20:8080/v1 --model ./qwen2.5-0.5b-onnx

The camera (synthetic by default) feeds CenterFace every few frames; every ``--every-s``
seconds the faces seen over the last ``--window-s`` seconds become a prompt (the template
below), and the model's answer streams out as ``token`` results and one final ``event`` with
the whole text, each source's state and the timings (time to first token, time per token).
Reports keep coming while the camera is down: the prompt then says so. The model is the
lowest-priority work: when the process passes its CPU target (70% of the cores; ``--headroom``)
the governor paces the model first, then detection. ``--max-tokens-per-s`` caps it by hand too
(0: no cap of its own).

``--model`` takes a folder with a language model exported to ONNX: ``model.onnx``
(a decoder with past key values, in the Hugging Face / Optimum layout), its ``tokenizer.json``
(read by the ``tokenizers`` package: ``pip install 'edgepipe[lm]'``) and ``config.json``. The
docs/language-models.md shows the commands that export one (Qwen2.5-0.5B-Instruct). Without
it (and without ``--server``), or with a folder that lacks one of those files, the run stops at
once with one line saying so (exit 2).

``--server URL`` sends the descriptions to an OpenAI-compatible engine on another machine
(llama.cpp's ``llama-server``, vLLM, Ollama's ``/v1``, TGI: the API's base URL, as
``http://host:8080/v1``; ``--server-model`` names the model where the server needs it). With
``--model`` too, that local model writes while the server is down, loading or busy, and the
server again once it answers; each description says which (``engine``). Without it, a
description the server cannot take is skipped, counted and logged, never silently. A server
that is not there at the start is a warning, not an exit: the camera keeps running. An API key
comes from the ``EDGEPIPE_LM_API_KEY`` environment variable or ``server-api-key`` in the params
file (``--params``), and is never shown (docs/language-models.md).

With ``--port N`` (an option of ``edgepipe run``) viewers watch at http://127.0.0.1:N/: the
camera's video, the face boxes, and the tokens and descriptions as they stream, on the
``results`` data channel. Nothing is encoded while nobody watches.

With ``--mqtt URL`` the face detections, the descriptions (``event``), the tokens and the
camera's state are published to that MQTT broker (``edgepipe/<host>/describe_scene/...``); with
``--events-dir DIR`` a face starts an MP4 clip of the camera there, with the 5 seconds before
it. Neither is done without its parameter.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Literal

from edgepipe import Detector, Message, Pipeline, Range, VideoSource, WebRTCStream, WritableFolder
from edgepipe.lm import Describe, ModelFolder, RemoteEngine, SamplingParams, folder_problem
from edgepipe.media import SYNTHETIC_DEFAULT
from edgepipe.sinks import add_mqtt_and_events

log = logging.getLogger("describe_scene")

TEMPLATE = (
    "You watch a security camera ({state}). In the last {seconds:.0f} seconds it saw: {summary}.\n"
    "One short sentence for the operator:"
)


async def show(message: Message) -> None:
    if message.kind == "event":
        data = message.data
        log.info("description %d (%d tokens, first after %.0f ms, %.1f ms/token): %r", data["request"],
                 data["new_tokens"], data["ttft_ms"], data["tpot_ms"], data["text"])  # fmt: skip


def pipeline(
    source: str = SYNTHETIC_DEFAULT,
    model: Annotated[Path | None, ModelFolder(optional=True)] = None,
    detect: str = "centerface",
    every_s: Annotated[float, Range(0, low_open=True)] = 10.0,
    window_s: Annotated[float, Range(0, low_open=True)] = 10.0,
    max_new_tokens: Annotated[int, Range(1)] = 48,
    max_tokens_per_s: Annotated[float, Range(0)] = 0.0,
    mqtt: str = "",
    events_dir: Annotated[str, WritableFolder()] = "",
    mqtt_device: str = "",
    server: str = "",
    server_model: str = "",
    server_api_key: str = "",
    server_slots: Annotated[int, Range(0)] = 0,
    first_token_s: Annotated[float, Range(0, low_open=True)] = 10.0,
    images: Literal["off", "auto", "on"] = "off",
) -> Pipeline:
    """camera -> faces -> describe -> log (tokens and descriptions reach --results); camera,
    faces and describe -> viewers.

    Args:
        source: The camera: synthetic://WxH@FPS, rtsp://..., a video file or /dev/videoN.
        model: Folder of the language model exported to ONNX: model.onnx, tokenizer.json and
            config.json (docs/language-models.md shows how to export one); with --server, the
            fallback while the server cannot answer.
        detect: The face detector: a registry name (edgepipe models list) or an .onnx file.
        every_s: Seconds between two descriptions, input or not.
        window_s: Seconds of detections each description covers.
        max_new_tokens: The longest description, in tokens.
        max_tokens_per_s: Cap on the model's decode rate (0: none of its own; the CPU
            governor paces it all the same).
        mqtt: Publish the faces, descriptions, tokens and the camera's state to this MQTT
            broker (mqtt://host:port, mqtts://user:pass@host); nothing is published without it.
        events_dir: Record an MP4 clip around each face (5 s before, 5 s after) into this
            folder; no clip without it.
        mqtt_device: the device id in the MQTT topics and client id (default: EDGEPIPE_DEVICE,
            else the host name); each process on one box needs its own (one per camera).
        server: An OpenAI-compatible engine's API URL (http://host:8080/v1) that writes the
            descriptions instead of the box.
        server_model: The model's name on the server (llama-server ignores it).
        server_api_key: The server's API key: put it in the params file, or set
            EDGEPIPE_LM_API_KEY, rather than on the command line; never shown.
        server_slots: Requests the server takes at once (0: what llama-server's /props says,
            else 1).
        first_token_s: Seconds the server has for its first token before the request goes
            elsewhere.
        images: Send the camera's latest picture (512 px, JPEG) with each request: auto where
            the server declares image input (llama-server's /props), on always, off never.
    """
    if model is None and not server:
        raise ValueError(f"--model is required: {folder_problem(None)}, or --server URL")
    p = Pipeline("describe_scene")
    camera = p.source("camera", VideoSource(source))
    pictures = bool(server) and images != "off"  # the detections then carry their frame
    faces = p.stage("faces", Detector(detect, every=5, keep_frame=pictures), inputs=camera, timeout_s=5.0)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.7, top_p=0.9)
    # The camera's own state (live, stalled, reconnecting) reaches the prompt through the graph:
    # a camera that stopped sending is reported even though no detections arrive.
    writer: RemoteEngine | Path | None = model
    if server:  # the server writes; the local model, if given, while it cannot
        writer = RemoteEngine(server, model=server_model, api_key=server_api_key or None,
                              slots=server_slots or None, first_token_s=first_token_s,
                              images={"auto": None, "on": True, "off": False}[images])  # fmt: skip
    assert writer is not None
    describe = Describe(writer, fallback=model if server else None, template=TEMPLATE,
                        window_s=window_s, every_s=every_s, params=params,
                        max_tokens_per_s=max_tokens_per_s or None)  # fmt: skip
    words = p.stage("describe", describe, inputs=faces, policy="latest", queue_size=8)
    p.sink("log", show, inputs=words, queue_size=64)
    stream = WebRTCStream()
    p.sink("view", stream.video("camera"), inputs=camera)
    p.sink("view_results", stream.results, inputs=[faces, words], queue_size=64)
    add_mqtt_and_events(p, mqtt=mqtt, events_dir=events_dir, frames=camera, triggers=faces,
                        results=[faces, words], live=True, device=mqtt_device)  # fmt: skip
    return p
