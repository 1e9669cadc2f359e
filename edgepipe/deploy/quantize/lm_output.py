"""What ``edgepipe quantize MODEL_FOLDER`` (a language model: :mod:`.decoder`, :mod:`.agreement`)
takes and prints beside the detector path's own: its defaults, its prompts file, its report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edgepipe.deploy.output import console, table
from edgepipe.deploy.quantize.decoder import KEPT_BY_DEFAULT, DecoderQuantError

DEFAULT_MIN_AGREEMENT = 0.3
"""Greedy top-1 agreement below which the quantized model is refused (exit 1). A floor that
catches a broken model, not a quality bar: random weights (the test and bench models) make flat
logits whose top token moves at the slightest change (int4 agrees on 0.45 of the 125M bench
model's positions, int8 on 0.94; a model with an outlier in every weight block, int4: 0.27); a
trained model's peaked logits agree more, and a deployment should ask for its own floor."""
DEFAULT_MIN_COSINE = 0.9
"""Mean logit cosine below which the quantized model is refused (exit 1): int4 of the 125M bench
model 0.954, int8 0.9996; the outlier model above, int4: 0.69."""
DEFAULT_BITS = 4
DEFAULT_BLOCK = 32
DEFAULT_ACCURACY_LEVEL = 4
DEFAULT_POSITIONS = 32
DEFAULT_KEEP = KEPT_BY_DEFAULT
LM_OPTIONS = ("bits", "block", "accuracy_level", "keep", "prompts", "positions", "min_cosine")
"""The options only a language model takes (None when not given)."""


def lm_options_given(args: argparse.Namespace) -> list[str]:
    """The language-model options on the command line, as ``--flag`` words."""
    return [f"--{name.replace('_', '-')}" for name in LM_OPTIONS if getattr(args, name, None) is not None]


def parse_keep(text: str | None) -> tuple[str, ...]:
    """``--keep lm_head,embed`` as names; ``none`` keeps nothing; not given: :data:`DEFAULT_KEEP`."""
    if text is None:
        return DEFAULT_KEEP
    names = tuple(k.strip() for k in text.split(",") if k.strip())
    return () if names == ("none",) else names


def read_prompts(path: str) -> list[str]:
    """The non-blank lines of the file at ``path``; :class:`DecoderQuantError` when there are
    none or it cannot be read."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DecoderQuantError(
            f"--prompts {path}: cannot read it ({reason}); give a text file, one prompt a line"
        ) from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise DecoderQuantError(f"--prompts {path}: no prompt in it; give a text file, one prompt a line")
    return lines


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB"


def problems(figures: Any, min_agreement: float, min_cosine: float) -> list[str]:
    """What falls short of the floors, as phrases (empty: it agrees)."""
    out = []
    if figures.top1 < min_agreement:
        out.append(f"the next token is the source's on {figures.top1:.0%} of {figures.positions} "
                   f"positions < {min_agreement:.0%}")  # fmt: skip
    if figures.cosine_mean < min_cosine:
        out.append(f"the mean logit cosine is {figures.cosine_mean:.4f} < {min_cosine:g}")
    return out


def print_lm(summary: Any, figures: Any, short: list[str]) -> None:
    kept = f", kept in float32: {', '.join(summary.kept)}" if summary.kept else ""
    print(f"{summary.source} -> {summary.output} (int{summary.bits} weights, MatMulNBits block "
          f"{summary.block}, accuracy level {summary.accuracy_level}: "
          f"{summary.matmuls} MatMuls{kept})")  # fmt: skip
    (w_src, w_out), (f_src, f_out) = summary.weight_bytes, summary.file_bytes
    rows = [
        ("weights", _size(w_src), _size(w_out), f"{w_out / w_src:.2f}x" if w_src else "-"),
        ("model files", _size(f_src), _size(f_out), f"{f_out / f_src:.2f}x" if f_src else "-"),
    ]
    columns = ("", "source", f"int{summary.bits}", "ratio")
    console().print(table(None, columns, rows, right=columns[1:]))
    verdict = "ok" if not short else "below the floor"
    print(f"agreement on {figures.positions} positions of {figures.prompts} prompts: logit cosine mean "
          f"{figures.cosine_mean:.4f}, min {figures.cosine_min:.4f}; next token the same: "
          f"{figures.top1:.0%}, {verdict}")  # fmt: skip
    sys.stdout.flush()
