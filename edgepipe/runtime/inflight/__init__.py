"""Calls in flight: a node's ``process()`` on several threads at once, its items prepared in
order and its results finished and emitted in each lane's order (:mod:`.steps` says what a
node's steps are; :mod:`.flight` keeps the calls, :mod:`.preparer` feeds them,
:mod:`.present` paces the results, :mod:`.instances` says how many)."""
