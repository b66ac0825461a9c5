"""What moves a run's numbers besides the code under test, as its record keeps it
(``facts.conditions`` of run.json, issue 38), and the comparisons a report makes of them.

``Conditions`` holds the load average when the run started and when it ended, the cores, the
CPU's model and frequency governor, the accelerator, each GPU the run was given (model, SM and
memory clocks, the SM clock's maximum, the processes already on it that were not the run's),
and the thread settings the run was given (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``...).  A
fact that could not be read is None (or empty).

``differences`` says what differs between two runs' conditions enough to move a number: another
CPU model or governor, other GPUs, other clock *settings* (the SM clock's maximum, the
application clocks, the power limit: by more than ``CLOCK_SLACK``), other thread settings, other
processes on a GPU, a load that differs by more than ``LOAD_SLACK`` per core.  What varies with
idleness alone is recorded and never compared (``VOLATILE``): a GPU's current SM and memory clocks
(an idle H200 sits at 345 MHz and is at 1980 MHz just after a run, whatever it will measure),
and, had they been recorded, its temperature, free memory and utilisation; the load average is
compared only beyond its band.  ``busy`` is a run's load per core (the larger of its two
readings).  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["CLOCK_SLACK", "Conditions", "Gpu", "LOAD_SLACK", "VOLATILE", "differences"]

LOAD_SLACK = 0.5  # load per core: two runs whose busyness differs by more were not measured alike
CLOCK_SLACK = 0.1  # a GPU clock that differs by more than this fraction
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS")
# What a GPU reports that moves with idleness, not with what the run will measure: kept, not compared.
VOLATILE = ("sm_clock", "mem_clock", "temperature", "memory_free", "utilization")


def _num(d: Mapping, key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(d: Mapping, key: str) -> str:
    v = d.get(key)
    return v if isinstance(v, str) else ""


@dataclass(frozen=True)
class Gpu:
    """One GPU as the run found it."""

    name: str
    sm_clock: float | None = None  # MHz, when the run started (VOLATILE: not compared)
    mem_clock: float | None = None  # (VOLATILE: not compared)
    max_sm_clock: float | None = None
    others: int | None = None  # processes on it that were not the run's, when it started
    app_sm_clock: float | None = None  # the application clocks: what the GPU runs a kernel at (settings)
    app_mem_clock: float | None = None
    power_limit: float | None = None  # W

    def to_json(self) -> dict:
        return {"name": self.name, "sm_clock": self.sm_clock, "mem_clock": self.mem_clock,
                "max_sm_clock": self.max_sm_clock, "others": self.others, "app_sm_clock": self.app_sm_clock,
                "app_mem_clock": self.app_mem_clock, "power_limit": self.power_limit}

    @classmethod
    def from_json(cls, d: object) -> Gpu | None:
        if not isinstance(d, Mapping):
            return None
        others = d.get("others")
        return cls(_str(d, "name"), _num(d, "sm_clock"), _num(d, "mem_clock"), _num(d, "max_sm_clock"),
                   others if isinstance(others, int) and not isinstance(others, bool) else None,
                   _num(d, "app_sm_clock"), _num(d, "app_mem_clock"), _num(d, "power_limit"))

    def settings(self) -> tuple[tuple[str, float | None, str], ...]:
        """What of the GPU is set rather than measured, and so compared: (what, value, unit)."""
        return (("max SM clock", self.max_sm_clock, "MHz"), ("application SM clock", self.app_sm_clock, "MHz"),
                ("application memory clock", self.app_mem_clock, "MHz"), ("power limit", self.power_limit, "W"))


@dataclass(frozen=True)
class Conditions:
    load_start: float | None = None  # the 1-minute load average
    load_end: float | None = None
    cpus: int | None = None  # cores this process may use
    cpu_model: str = ""
    governor: str = ""  # cpufreq's scaling governor of cpu0 ("" where there is none)
    accelerator: str = ""
    gpus: tuple[Gpu, ...] = ()
    threads: tuple[tuple[str, str], ...] = ()  # the thread variables the run was given

    @property
    def busy(self) -> float | None:
        """The load per core while the run ran (the larger of its two readings); None: unknown."""
        loads = [x for x in (self.load_start, self.load_end) if x is not None]
        if not loads or not self.cpus:
            return None
        return max(loads) / self.cpus

    def to_json(self) -> dict:
        return {"load_start": self.load_start, "load_end": self.load_end, "cpus": self.cpus,
                "cpu_model": self.cpu_model, "governor": self.governor, "accelerator": self.accelerator,
                "gpus": [g.to_json() for g in self.gpus], "threads": dict(self.threads)}

    @classmethod
    def from_json(cls, d: object) -> Conditions:
        """A record's conditions (empty when it has none: a run of an older dsbisect)."""
        if not isinstance(d, Mapping):
            return cls()
        cpus = d.get("cpus")
        threads = d.get("threads") if isinstance(d.get("threads"), Mapping) else {}
        gpus = d.get("gpus") if isinstance(d.get("gpus"), (list, tuple)) else ()
        return cls(_num(d, "load_start"), _num(d, "load_end"),
                   cpus if isinstance(cpus, int) and not isinstance(cpus, bool) else None,
                   _str(d, "cpu_model"), _str(d, "governor"), _str(d, "accelerator"),
                   tuple(g for g in (Gpu.from_json(x) for x in gpus) if g is not None),
                   tuple(sorted((str(k), str(v)) for k, v in threads.items())))

    @property
    def known(self) -> bool:
        return self != Conditions()


def _clock_moved(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and max(a, b) > 0 and abs(a - b) / max(a, b) > CLOCK_SLACK


def _gpu_differences(a: Sequence[Gpu], b: Sequence[Gpu]) -> list[str]:
    if [g.name for g in a] != [g.name for g in b]:
        return [f"GPUs {', '.join(g.name for g in a) or 'none'} vs {', '.join(g.name for g in b) or 'none'}"]
    out = []
    for i, (x, y) in enumerate(zip(a, b)):  # settings only: the current clocks follow idleness (VOLATILE)
        for (what, u, unit), (_, v, _) in zip(x.settings(), y.settings()):
            if _clock_moved(u, v):
                out.append(f"GPU {i} {what} {u:g} vs {v:g} {unit}")
        if (x.others or 0) != (y.others or 0) and x.others is not None and y.others is not None:
            out.append(f"GPU {i} other processes {x.others} vs {y.others}")
    return out


def differences(a: Conditions, b: Conditions) -> list[str]:
    """What differs between two runs' conditions enough to move a number (nothing for what is
    not known of both)."""
    if not a.known or not b.known:
        return []
    out = []
    for what, u, v in (("CPU", a.cpu_model, b.cpu_model), ("governor", a.governor, b.governor),
                       ("accelerator", a.accelerator, b.accelerator)):
        if u and v and u != v:
            out.append(f"{what} {u} vs {v}")
    if a.threads != b.threads:
        out.append(f"threads {_threads(a)} vs {_threads(b)}")
    out += _gpu_differences(a.gpus, b.gpus)
    if a.busy is not None and b.busy is not None and abs(a.busy - b.busy) > LOAD_SLACK:
        out.append(f"load {a.busy:.1f} vs {b.busy:.1f} per core")
    return out


def _threads(c: Conditions) -> str:
    return " ".join(f"{k}={v}" for k, v in c.threads) or "none set"
