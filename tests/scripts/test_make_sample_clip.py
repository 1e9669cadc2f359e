from __future__ import annotations

from pathlib import Path

from edgepipe.core.install import missing
from tests.scripts.blocked import run_without

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_sample_clip.py"


def test_without_scikit_image_it_ends_in_one_line_naming_the_install(tmp_path: Path) -> None:
    # scikit-image (its sample photos) comes with the dev extra; blocked here as if it were not installed
    done = run_without("skimage", SCRIPT, str(tmp_path / "clip.mp4"), "--size", "64x48", "--seconds", "0.1")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [missing("skimage", "dev", "scripts/make_sample_clip.py")]
    assert not (tmp_path / "clip.mp4").exists()
