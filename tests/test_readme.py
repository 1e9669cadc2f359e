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


@pytest.mark.slow
def test_readme_pipeline_example_runs(tmp_path: Path) -> None:
    example = next(b for b in code_blocks("python") if "# pipelines/hello.py" in b)
    path = tmp_path / "hello.py"
    path.write_text(example)
    results = tmp_path / "events.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "edgepipe", "run", str(path), "--fps", "200", "--duration", "1", "--results", str(results)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(events) >= 5
    assert all(e["kind"] == "event" and e["data"]["n"] % 10 == 0 for e in events)


def test_readme_testing_example_runs() -> None:
    example = next(b for b in code_blocks("python") if "def test_double" in b)
    namespace: dict[str, object] = {}
    exec(compile(example, "README.md", "exec"), namespace)
    namespace["test_double"]()  # type: ignore[operator]
