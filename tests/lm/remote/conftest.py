"""A real llama.cpp server for the remote-engine tests (scripts/llama_server.py builds it once
per machine; scripts/test.sh runs that step), loading a tiny GGUF written here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts import llama_server, tiny_gguf


@pytest.fixture(scope="session")
def llama_binary() -> Path:
    path = llama_server.binary()
    if path is None:
        if os.environ.get("EDGEPIPE_REQUIRE_LLAMA_SERVER"):  # CI builds it: missing is a failure
            pytest.fail(llama_server.missing_reason())
        pytest.skip(llama_server.missing_reason())
    return path


@pytest.fixture(scope="session")
def gguf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Greedy output is "aaaa..."; 1024 positions of context."""
    return tiny_gguf.write(tmp_path_factory.mktemp("gguf") / "tiny.gguf", ctx=1024)


@pytest.fixture
def llama(llama_binary: Path, gguf_model: Path, tmp_path: Path) -> Iterator[llama_server.Server]:
    """One slot, 1024 positions, started and ready."""
    server = llama_server.Server(gguf_model, slots=1, ctx=1024, log=tmp_path / "llama-server.log")
    server.start()
    yield server
    server.stop()
