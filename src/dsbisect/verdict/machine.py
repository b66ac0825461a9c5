"""A run the machine broke, told from one the code broke: a process of a run meant for GPUs
whose CUDA initialisation failed (no driver, no device visible, a driver error).  Pure: no I/O.

The start-up hook notes each such failure as it happens (``RunDir.machine``), from inside the
process, before the error travels on; the words the run printed decide nothing.  Such a run
is a SKIP (``SkipCause.CUDA``): untestable here, stepped around by a bisection and named,
never the regression.  A run on CPU that touches CUDA is the code's doing (a commit that
initialises CUDA where it should not): it keeps its FAIL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dsbisect.core.model import Outcome
from dsbisect.verdict.outcome import Classified


@dataclass(frozen=True)
class CudaFailure:
    """One process's failed CUDA initialisation, as the start-up hook noted it."""

    rank: str | None  # RANK of the process (None: the launcher, or a process of no rank)
    error: str  # "RuntimeError: No CUDA GPUs are available"
    devices: str | None = None  # its CUDA_VISIBLE_DEVICES

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "a process"
        seen = f", CUDA_VISIBLE_DEVICES={self.devices}" if self.devices is not None else ""
        return f"{who}: {self.error}{seen}"


def machine_verdict(c: Classified, cuda: bool, failures: Sequence[CudaFailure]) -> tuple[Classified, bool]:
    """``c``, or a SKIP that names the machine when a run meant for GPUs (``cuda``) failed or
    hung after one of its processes could not initialise CUDA; and whether it was that."""
    if not (cuda and failures and c.outcome in (Outcome.FAIL, Outcome.HANG)):
        return c, False
    first = failures[0]
    more = f" (and {len(failures) - 1} more process{'es' if len(failures) > 2 else ''})" if len(failures) > 1 else ""
    return Classified(Outcome.SKIP, f"the machine's: CUDA could not be initialised ({first.describe()}){more}"), True
