"""Where a pipeline's results and pictures go besides the screen: event recordings with pre-roll
(:mod:`~edgepipe.sinks.events`), MQTT, msgpack and JSON-lines streams."""
