"""The README's commands and examples are what CI and users actually run; the README is a front
door (short, linking every page of docs/), and the documents' links lead somewhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli_process import edgepipe

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
README_MAX_LINES = 200
DOCUMENTS = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")])
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", flags=re.S | re.M)


def code_blocks(lang: str, text: str = README) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def anchors(text: str) -> set[str]:
    """The anchors GitHub makes of a document's headings (lower case, punctuation dropped,
    spaces to dashes)."""
    headings = re.findall(r"^#+ (.+)$", FENCED.sub("", text), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_is_a_front_door_linking_every_page_of_docs() -> None:
    assert len(README.splitlines()) <= README_MAX_LINES
    linked = {found["target"].partition("#")[0] for found in LINK.finditer(README)}
    pages = {p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")}
    assert "docs/architecture.md" in pages
    assert "docs/protocol.md" in pages
    assert pages - linked == set()
    assert "CONTRIBUTING.md" in linked


def test_every_link_between_the_documents_leads_to_a_file_and_heading() -> None:
    broken = []
    for doc in DOCUMENTS:
        for found in LINK.finditer(FENCED.sub("", doc.read_text())):
            target = found["target"]
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []


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
    result = edgepipe("run", REPO / "pipelines" / "hello.py", "--fps", "200", "--duration", "1",
                      "--results", results, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "'hello' ended (stop)" in result.stderr, result.stderr  # drained, not "forced"
    events = [json.loads(line)["data"] for line in results.read_text().splitlines()]
    assert len(events) >= 5
    assert all(e["n"] % 5 == 0 and e["even"] == (e["n"] % 2 == 0) for e in events)
    assert {e["even"] for e in events} == {True, False}


def test_the_testing_example_runs() -> None:
    text = (REPO / "docs" / "testing.md").read_text()
    example = next(b for b in code_blocks("python", text) if "def test_double" in b)
    namespace: dict[str, object] = {}
    exec(compile(example, "docs/testing.md", "exec"), namespace)
    namespace["test_double"]()  # type: ignore[operator]
