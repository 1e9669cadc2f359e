from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from edgepipe.core.errors import GraphError
from edgepipe.graph.pipeline import ErrorPolicy, Input, OnError, Pipeline


async def numbers() -> AsyncIterator[int]:
    for i in range(3):
        yield i


def to_text(x: int) -> str:
    return str(x)


def shout(s: str) -> str:
    return s.upper()


def take_float(x: float) -> None:
    pass


async def take_int(x: int) -> None:
    pass


def test_valid_graph_is_ordered_and_knows_its_consumers() -> None:
    p = Pipeline("ok")
    src = p.source("numbers", numbers)
    text = p.stage("text", to_text, inputs=src)
    p.sink("a", take_int, inputs=src)
    p.sink("b", print, inputs=[text, "numbers"])
    graph = p.validate()
    assert next(n.node_id for n in graph.nodes) == "numbers"
    assert set(graph.consumers["numbers"]) == {"text", "a", "b"}
    assert graph.consumers["text"] == ("b",)
    assert graph.warnings == ()


def test_duplicate_id_names_both_declarations() -> None:
    p = Pipeline()
    p.source("cam", numbers)
    with pytest.raises(
        GraphError,
        match=r"test_pipeline\.py:\d+: node 'cam': duplicate node id \(first declared at .*test_pipeline\.py:\d+\)",
    ):
        p.source("cam", numbers)


def test_dangling_input_suggests_the_close_name() -> None:
    p = Pipeline()
    p.source("detect", numbers)
    p.sink("log", print, inputs="detcet")
    with pytest.raises(
        GraphError,
        match=r"node 'log': input 'detcet' is not a node in this pipeline; did you mean 'detect'\?",
    ) as info:
        p.validate()
    assert info.value.node_id == "log"
    assert info.value.where is not None
    assert "test_pipeline.py" in info.value.where


def test_cycle_is_reported_in_flow_order() -> None:
    p = Pipeline()
    p.source("src", numbers)
    p.stage("a", lambda x: x, inputs=["src", "c"])
    p.stage("b", shout, inputs="a")
    p.stage("c", shout, inputs="b")
    p.sink("out", print, inputs="c")
    with pytest.raises(GraphError, match=r"node 'a': is part of a cycle: a -> b -> c -> a"):
        p.validate()


def test_sink_cannot_feed_another_node() -> None:
    p = Pipeline()
    p.source("src", numbers)
    p.sink("out", print, inputs="src")
    p.sink("again", print, inputs="out")
    with pytest.raises(GraphError, match="input 'out' is a sink"):
        p.validate()


def test_pipeline_needs_a_source_and_stages_need_inputs() -> None:
    with pytest.raises(GraphError, match="has no source"):
        Pipeline("empty").validate()
    p = Pipeline()
    p.source("src", numbers)
    p.stage("lonely", to_text, inputs=[])
    with pytest.raises(GraphError, match="node 'lonely': has no inputs"):
        p.validate()


def test_declared_types_are_checked_on_each_edge() -> None:
    p = Pipeline()
    src = p.source("numbers", numbers)
    text = p.stage("text", to_text, inputs=src)
    p.sink("ints", take_int, inputs=text)
    with pytest.raises(GraphError, match="node 'ints': takes int but input 'text' produces str"):
        p.validate()


def test_compatible_and_undeclared_types_pass() -> None:
    p = Pipeline()
    src = p.source("numbers", numbers)  # AsyncIterator[int] -> int
    p.sink("floats", take_float, inputs=src)  # int is not a float subclass, but...
    with pytest.raises(GraphError):
        p.validate()
    q = Pipeline()
    src = q.source("numbers", numbers)
    q.sink("any", lambda x: None, inputs=src)  # undeclared: not checked
    q.sink("explicit", print, inputs=src, in_type=object)
    assert q.validate()


def test_unconsumed_output_is_a_warning_not_an_error() -> None:
    p = Pipeline()
    src = p.source("numbers", numbers)
    p.stage("text", to_text, inputs=src)
    graph = p.validate()
    assert len(graph.warnings) == 1
    assert "node 'text'" in graph.warnings[0]


def test_bad_options_fail_at_the_declaration() -> None:
    p = Pipeline()
    src = p.source("numbers", numbers)
    with pytest.raises(GraphError, match="unknown channel policy 'newest'"):
        p.stage("a", to_text, inputs=src, policy="newest")
    with pytest.raises(GraphError, match="unknown error policy 'retry'; use one of: restart, skip, stop"):
        p.stage("b", to_text, inputs=src, on_error="retry")
    with pytest.raises(GraphError, match="queue_size must be at least 1"):
        p.stage("c", to_text, inputs=src, queue_size=0)
    other = Pipeline()
    foreign = other.source("x", numbers)
    with pytest.raises(GraphError, match="belongs to another Pipeline"):
        p.stage("d", to_text, inputs=foreign)


def test_error_policy_parse() -> None:
    assert ErrorPolicy.parse("stop").action is OnError.STOP
    custom = ErrorPolicy(OnError.RESTART, max_consecutive=3)
    assert ErrorPolicy.parse(custom) is custom


def test_each_input_is_a_lane_with_its_own_policy_and_size() -> None:
    p = Pipeline("lanes")
    camera = p.source("camera", numbers)
    faces = p.stage("faces", to_text, inputs=camera)
    motion = p.stage("motion", to_text, inputs=camera)
    annotate = p.stage(
        "annotate",
        print,
        inputs={
            "frames": Input(camera, policy="latest", queue_size=1),
            "faces": faces,
            "motion": (motion, "drop_new"),
        },
        queue_size=4,
    )
    p.sink("log", print, inputs=annotate)
    lanes = p.validate().node("annotate").lanes
    assert [(lane.name, lane.source, lane.policy.value, lane.size) for lane in lanes] == [
        ("frames", "camera", "latest", 1),
        ("faces", "faces", "block", 4),
        ("motion", "motion", "drop_new", 4),
    ]


def test_a_list_of_inputs_is_lanes_that_share_the_node_policy() -> None:
    p = Pipeline("shorthand")
    a = p.source("a", numbers)
    b = p.source("b", numbers)
    p.sink("out", print, inputs=[a, (b, "block", 16)], policy="latest", queue_size=2)
    lanes = p.validate().node("out").lanes
    assert [(lane.name, lane.policy.value, lane.size) for lane in lanes] == [
        ("a", "latest", 2),
        ("b", "block", 16),
    ]


def test_bad_lanes_are_refused_at_the_declaration() -> None:
    p = Pipeline("bad")
    src = p.source("src", numbers)
    with pytest.raises(GraphError, match=r"node 'x': lane 'frames': unknown channel policy 'newest'"):
        p.sink("x", print, inputs={"frames": (src, "newest")})
    with pytest.raises(GraphError, match=r"lane 'src': queue_size must be an integer of at least 1, got 0"):
        p.sink("y", print, inputs=[Input(src, queue_size=0)])
    with pytest.raises(
        GraphError, match=r"an input tuple is \(node, policy\) or \(node, policy, queue_size\)"
    ):
        p.sink("z", print, inputs=[(src, "block", 1, "extra")])
    with pytest.raises(GraphError, match="an input is listed twice"):
        p.sink("w", print, inputs={"one": src, "two": src})
    with pytest.raises(GraphError, match="inputs must be a node, a list of nodes or a dict of lanes"):
        p.sink("v", print, inputs=3)  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="timeout_s must be a positive number of seconds, got nan"):
        p.sink("u", print, inputs=src, timeout_s=float("nan"))


class Picture:
    """An item that is worth only while new, as a video frame."""

    perishable = True


class Camera:
    """A live source of pictures (as a VideoSource of a camera): ``live`` and the item type."""

    def __init__(self, live: bool = True) -> None:
        self.live = live

    async def __aiter__(self) -> AsyncIterator[Picture]:
        yield Picture()


class Feed:
    """A live source of results (a broker): live, but its items are not perishable."""

    live = True

    async def __aiter__(self) -> AsyncIterator[int]:
        yield 1


def lanes_of(p: Pipeline, node_id: str) -> list[tuple[str, str, int, bool]]:
    return [
        (lane.source, lane.policy.value, lane.size, lane.live_frames)
        for lane in p.validate().node(node_id).lanes
    ]


def test_a_live_sources_frames_default_to_the_newest_one_and_files_to_every_one() -> None:
    p = Pipeline("defaults")
    camera = p.source("camera", Camera())
    clip = p.source("clip", Camera(live=False))
    feed = p.source("feed", Feed())
    p.sink("view", print, inputs=[camera, clip, feed])
    assert lanes_of(p, "view") == [
        ("camera", "latest", 1, True),  # old code: block, 8
        ("clip", "block", 8, False),
        ("feed", "block", 8, False),
    ]
    # What is declared wins, each setting by itself; a latest lane of live frames keeps one.
    p.sink("record", print, inputs=camera, policy="block")
    p.sink("detect", print, inputs=camera, queue_size=2)
    p.sink("latest", print, inputs=camera, policy="latest")
    p.sink(
        "lanes",
        print,
        inputs={"a": Input(camera, "drop_new"), "b": (p.source("cam2", Camera()), "latest", 3)},
    )
    assert lanes_of(p, "record") == [("camera", "block", 8, True)]
    assert lanes_of(p, "detect") == [("camera", "latest", 2, True)]
    assert lanes_of(p, "latest") == [("camera", "latest", 1, True)]
    assert lanes_of(p, "lanes") == [("camera", "drop_new", 8, True), ("cam2", "latest", 3, True)]
    # max_age_s is for lossy lanes: a live camera's default lane is one.
    p.sink("aged", print, inputs=camera, max_age_s=1.0)
    assert p.validate().node("aged").lanes[0].max_age_s == 1.0


def test_a_stage_of_frames_is_no_live_source() -> None:
    def same(picture: Picture) -> Picture:
        return picture

    p = Pipeline("downstream")
    pixelated = p.stage("pixelate", same, inputs=p.source("camera", Camera()))
    p.sink("record", print, inputs=pixelated)
    assert lanes_of(p, "record") == [("pixelate", "block", 8, False)]  # a recording gets every frame


def test_a_node_runs_on_the_loop_when_its_code_says_so_unless_declared_otherwise() -> None:
    from edgepipe.graph.spec import on_loop

    class Cheap:
        on_loop = True

        def process(self, item: int) -> None:
            pass

    class Method:
        @on_loop
        def results(self, item: int) -> None:
            pass

    p = Pipeline("loop")
    src = p.source("numbers", numbers)
    p.sink("cheap", Cheap(), inputs=src)
    p.sink("method", Method().results, inputs=src)
    p.sink("said", Cheap(), inputs=src, on_loop=False)
    p.sink("plain", print, inputs=src)
    graph = p.validate()
    assert [graph.node(n).on_loop for n in ("cheap", "method", "said", "plain")] == [True, True, False, None]


def test_upstream_is_every_node_whose_output_reaches_a_node() -> None:
    p = Pipeline("up")
    a = p.source("a", numbers)
    b = p.source("b", numbers)
    text = p.stage("text", to_text, inputs=a)
    loud = p.stage("loud", shout, inputs=text)
    p.sink("out", print, inputs=[loud, b])
    graph = p.validate()
    assert set(graph.upstream("out")) == {"a", "b", "text", "loud"}
    assert graph.upstream("out") == tuple(n.node_id for n in graph.nodes if n.node_id != "out")  # graph order
    assert graph.upstream("loud") == ("a", "text")
    assert graph.upstream("a") == ()
