"""The deployment know-how behind ``edgepipe plan``, ``check-ops``, ``quantize``, ``compare``,
``doctor`` and ``trace``: what engineers putting models on edge hardware do by hand, as code.

Each command's work lives here (sums, tables, comparisons, diagnoses); the ``cli_*`` modules
only parse, print and choose the exit code. Shared output conventions: :mod:`.output`.
"""
