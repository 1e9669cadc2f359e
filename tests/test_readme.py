"""The README's commands and examples are what CI and users actually run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def code_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    commands = [c.strip() for c in code_blocks("sh")]
    test_command = next(c for c in commands if "test" in c and "edgepipe run" not in c)
    assert test_command in (REPO / ".ci" / "run").read_text().splitlines()
    assert any("edgepipe run pipelines/demo.py" in c for c in commands)


def test_readme_pipeline_example_is_the_shipped_file() -> None:
    example = next(b for b in code_blocks("python") if b.startswith("# pipelines/hello.py\n"))
    assert example == (REPO / "pipelines" / "hello.py").read_text()


@pytest.mark.slow
def test_hello_reports_every_fifth_tick_even_and_odd(tmp_path: Path) -> None:
    results = tmp_path / "events.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "edgepipe", "run", str(REPO / "pipelines" / "hello.py"), "--fps", "200", "--duration", "1",
         "--results", str(results)],
        capture_output=True, text=True, timeout=30, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "'hello' ended (stop)" in result.stderr, result.stderr  # drained, not "forced"
    events = [json.loads(line)["data"] for line in results.read_text().splitlines()]
    assert len(events) >= 5
    assert all(e["n"] % 5 == 0 and e["even"] == (e["n"] % 2 == 0) for e in events)
    assert {e["even"] for e in events} == {True, False}


def test_readme_testing_example_runs() -> None:
    example = next(b for b in code_blocks("python") if "def test_double" in b)
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    namespace["test_double"]()  # type: ignore[operator]
