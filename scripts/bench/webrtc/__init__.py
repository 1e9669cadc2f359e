"""Live video to WebRTC viewers (``python -m scripts.bench.webrtc``): :mod:`.bench` serves
:mod:`.pipeline` (or :mod:`.plain`, aiortc alone) to the peers of :mod:`.viewers` in another
process, then face_privacy's viewer page to headless Chromium (:mod:`.browser`)."""
