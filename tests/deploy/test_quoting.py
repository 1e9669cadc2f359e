"""File names in suggested commands read back as the same bytes."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess

import pytest

from edgepipe.deploy.quoting import python_literal, shell_arg, shown

GBK_NAME = os.fsdecode("笔记.txt".encode("gbk"))
"""A name whose bytes are GBK, as Python hands it over from the file system (surrogate escapes)."""
NAMES = [
    "notes.txt",
    "it's a $file (1).txt",
    "中文 笔记.txt",
    GBK_NAME,
    os.fsdecode(b"a'b\\c\xff\xfe.txt"),
    "line\nbreak.txt",
    os.fsdecode(b"\xd6a.txt"),  # a hex letter right after an escaped byte
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_reads_each_name_back_as_its_bytes() -> None:
    words = " ".join(shell_arg(name) for name in NAMES)
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {words}"], capture_output=True, check=True)
    assert done.stdout.split(b"\0")[:-1] == [os.fsencode(name) for name in NAMES]


def test_python_reads_each_name_back_as_its_bytes() -> None:
    for name in NAMES:
        value = ast.literal_eval(python_literal(name))
        assert os.fsencode(value) == os.fsencode(name)
    assert python_literal(GBK_NAME) == repr("笔记.txt".encode("gbk"))


def test_names_are_shown_without_replacement_characters() -> None:
    assert shown("中文 笔记.txt") == "中文 笔记.txt"
    assert shell_arg("notes.txt") == "notes.txt"
    assert shown(GBK_NAME) == shell_arg(GBK_NAME) == "$'\\xb1\\xca\\xbc\\xc7.txt'"
    for name in NAMES:
        shown(name).encode("utf-8")  # printable anywhere: no surrogates left in it
        assert "\ufffd" not in shown(name)
