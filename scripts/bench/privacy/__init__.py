"""face_privacy's CPU per frame against the sum of its parts (``python -m scripts.bench.privacy``):
:mod:`.bench` runs the pipeline and the bare loops of :mod:`.parts`; :mod:`.figures` does the
arithmetic."""
