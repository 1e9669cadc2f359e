"""CPU headroom under joint load (``python -m scripts.bench.headroom``): :mod:`.bench` runs the
load (:mod:`.pipeline`: cameras, one face detector, a writing LM) governed and ungoverned and
judges it; :mod:`.figures` makes one run's figures, :mod:`.summary` puts the runs together
against the bare costs, which :mod:`.bare` and :mod:`.decode` measure. ``scale`` and ``offload``
run the same load."""
