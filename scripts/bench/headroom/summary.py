"""The governed runs of :mod:`.bench` put together and judged: pure functions only.

Each run's figures come from :mod:`.figures`; the bare costs (:class:`BareCosts`) from the
bare loops of :mod:`.bare`, measured in the same bench. With them, for each governed run:

- ``useful``: the CPU the counted work would take at its bare per-unit costs (frames decoded,
  model runs, tracker updates and carries, result lines, prompt and generated tokens), per
  part and in all, in CPU-seconds per second, and ``fraction``: that over the process's CPU;
- ``capacity_detections_per_s``: what the budget affords at bare costs, (target x usable cores -
  the decode CPU of the frames the cameras delivered - the LM CPU of the tokens the run
  delivered, prompts included) / the bare CPU of one model run;
- ``model_wall_over_bare``: the mean wall time of a model run in the run / a bare run's.

:func:`governed_summary` adds those to each run and takes the medians over the runs (the spread
of detections/s too); :func:`judge` holds them, and every governed run, to :class:`Targets`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BareCosts:
    """What each unit of the counted work costs done plainly, alone (CPU seconds per unit)."""

    decode_cpu_s: float
    """One frame of the clip through a plain PyAV decode loop."""
    model_cpu_s: float
    """One model run: NV12 frame to input tensor, ``session.run``, outputs to boxes."""
    model_wall_ms: float
    """Wall time of one bare ``session.run`` (mean)."""
    tracker_update_cpu_s: float
    """One tracker update with a model run's boxes."""
    tracker_predict_cpu_s: float
    """One tracker carry (a frame the model skipped)."""
    write_cpu_s: float
    """One result line: ``json.dumps`` and a write."""
    token_cpu_s: float
    """One generated token: a decode step of the LM and its pick."""
    prompt_token_cpu_s: float
    """One prompt token through prefill."""


def _median(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return round(statistics.median(found), 3) if found else None


def useful_cpu(run: dict[str, Any], bare: BareCosts) -> dict[str, float | None]:
    """CPU-seconds per second the run's counted work takes at bare costs, per part and in all
    (``total``), and ``fraction``: the total over the process's CPU (None if unknown)."""
    parts = {
        "decode": run["frames_decoded_per_s"] * bare.decode_cpu_s,
        "model": run["detections_per_s"] * bare.model_cpu_s,
        "tracker": run["detections_per_s"] * bare.tracker_update_cpu_s
        + run["carries_per_s"] * bare.tracker_predict_cpu_s,
        "writing": run["results_per_s"] * bare.write_cpu_s,
        "lm": lm_cpu(run, bare),
    }
    total = sum(parts.values())
    process = run.get("cpu_s_per_s")
    out: dict[str, float | None] = {k: round(v, 4) for k, v in parts.items()}
    out["total"] = round(total, 4)
    out["fraction"] = round(total / process, 3) if process else None
    return out


def lm_cpu(run: dict[str, Any], bare: BareCosts) -> float:
    """CPU-seconds per second the LM needs at bare costs for the tokens the run delivered and
    the prompts before them."""
    return run["tokens_per_s"] * bare.token_cpu_s + run["prompt_tokens_per_s"] * bare.prompt_token_cpu_s


def capacity(run: dict[str, Any], bare: BareCosts, *, target: float, cores: float) -> float | None:
    """Model runs per second the budget affords at bare costs, after the decode of the frames
    the cameras delivered and the LM's tokens: (target x cores - decode - LM) / model run."""
    if bare.model_cpu_s <= 0:
        return None
    spare = target * cores - run["frames_decoded_per_s"] * bare.decode_cpu_s - lm_cpu(run, bare)
    return round(max(0.0, spare) / bare.model_cpu_s, 2)


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median; None without values or with a median of 0."""
    if not values:
        return None
    middle = statistics.median(values)
    return round((max(values) - min(values)) / middle, 3) if middle else None


def governed_summary(
    runs: Sequence[dict[str, Any]], bare: BareCosts, *, target: float, cores: float
) -> dict[str, Any]:
    """The governed runs, each with ``useful``, ``capacity_detections_per_s`` and
    ``model_wall_over_bare`` added, and the medians over them (``rate_cv`` per stream)."""
    out_runs = []
    for run in runs:
        infer, bare_ms = run.get("infer_ms_mean"), bare.model_wall_ms
        out_runs.append({
            **run,
            "useful": useful_cpu(run, bare),
            "capacity_detections_per_s": capacity(run, bare, target=target, cores=cores),
            "model_wall_over_bare": round(infer / bare_ms, 3) if infer and bare_ms else None,
        })  # fmt: skip
    rates = [r["detections_per_s"] for r in out_runs]
    sources = sorted({s for r in out_runs for s in r["rate_cv"]})
    return {
        "runs": out_runs,
        "detections_per_s_median": _median(rates),
        "capacity_detections_per_s": _median([r["capacity_detections_per_s"] for r in out_runs]),
        "detections_per_s_spread": spread(rates),
        "useful_fraction": _median([r["useful"]["fraction"] for r in out_runs]),
        "model_wall_over_bare": _median([r["model_wall_over_bare"] for r in out_runs]),
        "rate_cv": {s: _median([r["rate_cv"].get(s) for r in out_runs]) for s in sources},
    }


@dataclass(frozen=True, slots=True)
class Targets:
    """The acceptance targets (issues 12 and 23); never lowered."""

    cpu_p95: float
    """Every governed run: the p95 of its 1 s CPU windows at most this share of the cores ..."""
    cpu_mean: float
    """... and its mean at least this (the budget is spent)."""
    detections_per_s: float
    """Every governed run, all streams together."""
    per_camera: float
    """Every governed run, each camera."""
    fairness: float
    """Every governed run: the slowest stream's detections/s over the fastest's."""
    latency_growth: float
    latency_slack_ms: float
    """Every governed run, per stream: last-10-s p95 latency <= growth x first-10-s p95 + slack."""
    rss_growth: float
    """Every governed run: RSS at the end over RSS after warm-up, less 1."""
    tokens_per_s: float
    """Every governed run: the LM keeps writing."""
    of_capacity: float
    """The median detections/s over the capacity at bare costs."""
    over_ungoverned: float
    """The median detections/s over the ungoverned run's."""
    spread: float
    useful_fraction: float
    model_wall_over_bare: float
    rate_cv: float
    """Per stream (the median over the governed runs)."""
    others_cpu: float
    """A run whose other processes took more than this share of the cores does not count."""
    cameras: int


def _worst(values: Sequence[float | None], high_is_bad: bool) -> float | None:
    found = [v for v in values if v is not None]
    if len(found) < len(values) or not found:
        return None
    return max(found) if high_is_bad else min(found)


def _fair(run: dict[str, Any], cameras: int) -> float:
    rates = [s["detections_per_s"] for s in run["streams"]]
    if len(rates) != cameras or max(rates) <= 0:
        return 0.0
    return min(rates) / max(rates)


def _latency_margin(run: dict[str, Any], tg: Targets) -> float | None:
    """The worst stream's last-10-s p95 less what the rule allows (None if a stream lacks one)."""
    margins = []
    for s in run["streams"]:
        first, last = s["latency_p95_first_ms"], s["latency_p95_last_ms"]
        if first is None or last is None:
            return None
        margins.append(last - (tg.latency_growth * first + tg.latency_slack_ms))
    return max(margins) if len(margins) == tg.cameras else None


def _rss_growth(run: dict[str, Any]) -> float | None:
    start, end = run["rss_start_mb"], run["rss_end_mb"]
    return (end - start) / start if start and end is not None else None


def _at_most(value: float | None, limit: float, shown: str) -> tuple[bool, str]:
    return value is not None and value <= limit, "-" if value is None else shown


def _at_least(value: float | None, limit: float, shown: str) -> tuple[bool, str]:
    return value is not None and value >= limit, "-" if value is None else shown


def judge(
    governed: dict[str, Any], ungoverned: dict[str, Any] | None, targets: Targets, *,
    bare_others: float | None = None,
) -> dict[str, tuple[bool, str]]:  # fmt: skip
    """Each target's name -> (met, the figure as printed); ``governed`` as
    :func:`governed_summary` makes it. Per-run targets show the worst run's figure.
    ``bare_others``: the other processes' share of the cores during the bare loops (their wall
    times are only as good as the machine was quiet)."""
    tg, runs = targets, governed["runs"]
    each = f"(each of {len(runs)} governed runs)"
    out: dict[str, tuple[bool, str]] = {}
    cpu_p95 = _worst([r["cpu_p95"] for r in runs], high_is_bad=True)
    out[f"cpu_p95 <= {tg.cpu_p95:g} {each}"] = _at_most(cpu_p95, tg.cpu_p95, f"worst {cpu_p95}")
    cpu_mean = _worst([r["cpu_mean"] for r in runs], high_is_bad=False)
    out[f"cpu_mean >= {tg.cpu_mean:g} {each}"] = _at_least(cpu_mean, tg.cpu_mean, f"least {cpu_mean}")
    rates = _worst([r["detections_per_s"] for r in runs], high_is_bad=False)
    out[f"detections_per_s >= {tg.detections_per_s:g} {each}"] = _at_least(
        rates, tg.detections_per_s, f"least {rates}"
    )
    cams = [s["detections_per_s"] for r in runs for s in r["streams"]]
    every_camera = bool(runs) and all(len(r["streams"]) == tg.cameras for r in runs)
    out[f"detections_per_s >= {tg.per_camera:g} on each of {tg.cameras} cameras {each}"] = (
        every_camera and min(cams) >= tg.per_camera,
        f"least {min(cams, default=0.0):.2f}",
    )
    fair = min((_fair(r, tg.cameras) for r in runs), default=0.0)
    out[f"slowest stream >= {tg.fairness:g} x the fastest {each}"] = (
        fair >= tg.fairness,
        f"least {fair:.2f}",
    )
    margin = _worst([_latency_margin(r, tg) for r in runs], high_is_bad=True)
    name = f"latency_p95_last <= {tg.latency_growth:g} x first + {tg.latency_slack_ms:g} ms {each}"
    out[name] = _at_most(margin, 0.0, f"worst {margin:+.0f} ms" if margin is not None else "")
    tokens = _worst([r["tokens_per_s"] for r in runs], high_is_bad=False)
    out[f"tokens_per_s >= {tg.tokens_per_s:g} {each}"] = _at_least(tokens, tg.tokens_per_s, f"least {tokens}")
    growth = _worst([_rss_growth(r) for r in runs], high_is_bad=True)
    out[f"RSS growth < {tg.rss_growth:.0%} {each}"] = (
        growth is not None and growth < tg.rss_growth,
        "-" if growth is None else f"worst {growth:+.1%}",
    )
    median, cap = governed["detections_per_s_median"], governed["capacity_detections_per_s"]
    of_cap = median / cap if median is not None and cap else None
    shown = f"{median} / {cap} = {of_cap:.2f}" if of_cap is not None else ""
    out[f"detections_per_s_median >= {tg.of_capacity:g} x capacity"] = _at_least(
        of_cap, tg.of_capacity, shown
    )
    base = ungoverned["detections_per_s"] if ungoverned else None
    over = median / base if median is not None and base else None
    shown = f"{median} / {base} = {over:.2f}" if over is not None else ""
    out[f"detections_per_s_median >= {tg.over_ungoverned:g} x ungoverned"] = _at_least(
        over, tg.over_ungoverned, shown
    )
    for key, limit, high_is_bad in (("detections_per_s_spread", tg.spread, True),
                                    ("useful_fraction", tg.useful_fraction, False),
                                    ("model_wall_over_bare", tg.model_wall_over_bare, True)):  # fmt: skip
        value = governed[key]
        check = _at_most if high_is_bad else _at_least
        out[f"{key} {'<=' if high_is_bad else '>='} {limit:g}"] = check(value, limit, f"{value}")
    cvs = governed["rate_cv"]
    worst_cv = _worst(list(cvs.values()), high_is_bad=True) if len(cvs) == tg.cameras else None
    out[f"rate_cv <= {tg.rate_cv:g} on each of {tg.cameras} streams"] = _at_most(
        worst_cv, tg.rate_cv, f"worst {worst_cv}"
    )
    others = [r["others_cpu_mean"] for r in [*runs, *([ungoverned] if ungoverned else [])]]
    noisy = _worst([*others, *([] if bare_others is None else [bare_others])], high_is_bad=True)
    out[f"others_cpu_mean <= {tg.others_cpu:g} in every run and the bare loops"] = _at_most(
        noisy, tg.others_cpu, f"worst {noisy}"
    )
    return out
