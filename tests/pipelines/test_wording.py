"""Face privacy's operation has one name wherever a user reads it: the shipped pipelines' help,
the README and docs say "pixelate" (what :class:`~edgepipe.vision.Redact` does: each cell of a
face becomes its mean), never "blur", the name of a different filter that a user would then look
for. ``blur_region``, the drawing function's name, is code, not wording."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.cli_process import in_process

REPO = Path(__file__).resolve().parents[2]
# Not blur_region: "_" is a word character, so no word boundary ends "blur" there.
BLUR = re.compile(r"\b(?:un)?blur(?:s|red|ring)?\b", re.IGNORECASE)


@pytest.mark.parametrize("path", sorted(p.name for p in (REPO / "pipelines").glob("*.py")))
def test_a_shipped_pipelines_help_says_pixelate_not_blur(
    capsys: pytest.CaptureFixture[str], path: str
) -> None:
    result = in_process(capsys, "run", f"pipelines/{path}", "--help")
    assert result.returncode == 0, result.stderr
    assert not BLUR.findall(result.stdout), result.stdout


def test_the_readme_and_docs_say_pixelate_not_blur() -> None:
    pages = [REPO / "README.md", REPO / "pipelines" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = [f"{page.relative_to(REPO)}:{n}: {line.strip()}"
             for page in pages for n, line in enumerate(page.read_text().splitlines(), 1)
             if BLUR.search(line)]  # fmt: skip
    assert not found, "\n".join(found)
    help_text = (REPO / "pipelines" / "face_privacy.py").read_text()
    assert "pixelated" in help_text  # the word the check expects is the one the pipeline uses
