"""The checkout's tools (sample clips, test models, the llama-server build, the exit-code and
constraint checks: each runs as ``python scripts/NAME.py``, its usage in its docstring) and, in
:mod:`scripts.bench`, the benchmarks. A package so that the benchmarks and the tests import the
tools by one name (``from scripts import tiny_lm``); the installed ``edgepipe`` never imports it."""
