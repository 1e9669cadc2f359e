"""The benchmarks: each measures edgepipe against a baseline run in the same session (the
machines are shared and noisy), prints its figures and ends with one JSON line. From the
checkout's root, ``python -m scripts.bench.NAME`` (``--help`` for the options):

- ``runtime``, ``decode``, ``detect``, ``lm``, ``recording``: the engine, the decoder, the
  detector, the language-model runner and the recorder against their bare loops;
- ``headroom`` (a package: the load, its figures, the bare loops), ``scale``, ``offload``:
  cameras, a detector and a writing LM in one governed process;
- ``privacy`` (a package), ``live_privacy``: face_privacy against the sum of its parts;
- ``webrtc`` (a package: servers, viewers, a browser): live video to viewers;
- ``soak``: ten minutes on a camera that restarts, for growth.

Their toolkit: :mod:`.proc` (CPU, memory, threads of a process and of the machine, the processes
below one), :mod:`.child` (starting and stopping the processes measured) and :mod:`.verdict`
(the targets and the last line)."""
