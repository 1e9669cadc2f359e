"""Where a pipeline's results go besides viewers: streams for other programs
(:mod:`~edgepipe.sinks.streams`), MQTT and event recordings. Each is a sink node
(``p.sink(name, handler, inputs=...)``)."""
