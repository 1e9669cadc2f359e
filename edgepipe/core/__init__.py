"""The bottom layer every other package builds on: errors, bounded channels, leases, thread
names and CPU time per thread, executors, spans, the node context and the event loop's choice.

Standard library only, and nothing here imports another edgepipe package. The public API is
:mod:`edgepipe` (its ``__init__``); declaring a graph is :mod:`edgepipe.graph`, running one
:mod:`edgepipe.runtime`.
"""
