"""The scheduler: one CPU budget for the process, admission of heavy calls, load measurement,
the headroom governor, and staggered phases (see each module)."""

from __future__ import annotations

from edgepipe.sched.budget import CpuBudget, cpu_budget, usable_cores
from edgepipe.sched.gate import AdmissionCancelled, AdmissionTimeout, Gate, Ticket, gate
from edgepipe.sched.governor import Governor
from edgepipe.sched.knobs import EveryKnob, PaceKnob, ThinKnob
from edgepipe.sched.scheduler import Scheduler
from edgepipe.sched.stagger import phases

__all__ = [
    "AdmissionCancelled",
    "AdmissionTimeout",
    "CpuBudget",
    "EveryKnob",
    "Gate",
    "Governor",
    "PaceKnob",
    "Scheduler",
    "ThinKnob",
    "Ticket",
    "cpu_budget",
    "gate",
    "phases",
    "usable_cores",
]
