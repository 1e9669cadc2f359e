"""Serving a pipeline: WebRTC video and results (and the HTTP app that answers viewers)."""
