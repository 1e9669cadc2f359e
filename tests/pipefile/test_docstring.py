from __future__ import annotations

from edgepipe.pipefile.docstring import args_section, summary


def pipeline() -> None:
    """camera -> faces -> viewers,
    and a log.

    More prose, with a colon: not an argument.

    Args:
        source: the camera: a URL, a file or /dev/video0.
        every: run the model on one frame in this many;
            a tracker carries the boxes between.

            Still about every.
        input_size (int): the model's input, in pixels.
        undocumented:
        **extra: anything else.

    Returns:
        name: not an argument.
    """


def test_args_entries_with_continuation_lines() -> None:
    assert args_section(pipeline.__doc__) == {
        "source": "the camera: a URL, a file or /dev/video0.",
        "every": "run the model on one frame in this many; a tracker carries the boxes between. Still about every.",
        "input_size": "the model's input, in pixels.",
        "undocumented": "",
        "extra": "anything else.",
    }


def test_summary_is_the_first_paragraph_on_one_line() -> None:
    assert summary(pipeline.__doc__) == "camera -> faces -> viewers, and a log."
    assert summary(None) == ""
    assert summary("Args:\n    x: y") == ""


def test_no_section_or_no_docstring_is_no_help() -> None:
    assert args_section(None) == {}
    assert args_section("Just prose.\n\nname: not in a section.") == {}
    assert args_section("One line.\nArgs:\n    x: first line\n") == {"x": "first line"}
