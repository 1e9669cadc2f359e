from __future__ import annotations

import sys

import pytest

from edgepipe.runtime.malloc import fix_mmap_threshold


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_the_threshold_is_set_on_glibc() -> None:
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert fix_mmap_threshold() is True


def test_0_leaves_glibcs_threshold_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEPIPE_MMAP_THRESHOLD", "0")
    assert fix_mmap_threshold() is False
