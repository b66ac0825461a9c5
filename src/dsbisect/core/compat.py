"""Compatibility shims for running old releases on a current torch.

The shims themselves live in the start-up hook that every point venv carries
(``_hook/dsbisect_hook.py``); a case turns them on by name (``compat:`` in matrix.yaml),
and every report lists the ones in use, since a shim is a possible confounder.
"""

from __future__ import annotations

SHIMS: dict[str, str] = {
    "torch-elastic-socket": (
        "restores torch.distributed.elastic.agent.server.api._get_socket_with_port and .log, "
        "removed in torch 2.4 and imported by deepspeed < 0.14.4 at import time"
    ),
    "numpy-bufsize": (
        "restores numpy.BUFSIZE (8192), removed in numpy 2 and imported by "
        "deepspeed <= 0.14 (autotuning/scheduler.py) at import time"
    ),
}


def describe(names: tuple[str, ...]) -> list[str]:
    return [f"{n}: {SHIMS[n]}" for n in names if n in SHIMS]
