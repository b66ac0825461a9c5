"""Synthetic flight-recorder sets for tests and benchmarks: a run folder whose ranks split into
groups stuck at different sequence numbers, written as torch's NCCL dumps are (pickled dicts
of ``entries``, ``nccl_trace_rank_<R>``), so the real readers read them."""

from __future__ import annotations

import pickle
from pathlib import Path

TORCH = "/envs/point/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py"


def _entry(seq: int, state: str, numel: int, frames: list[dict]) -> dict:
    return {"record_id": seq, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:_all_gather_base",
            "input_sizes": [[numel]], "output_sizes": [[numel * 2]], "state": state, "is_p2p": False,
            "frames": frames, "time_created_ns": seq * 1000}


def split_hang(folder: Path, world: int = 512, first: int = 100, stuck_at: int = 120, numel: int = 2048) -> Path:
    """Ranks ``0 .. world/2 - 1`` have passed #``stuck_at - 1`` and wait in #``stuck_at``; the
    other half still waits in #``stuck_at - 1``, at ``engine.py:1234``."""
    folder.mkdir(parents=True, exist_ok=True)
    ahead = [{"name": "all_gather_into_tensor", "filename": TORCH, "line": 4186},
             {"name": "_allgather_params", "filename": "/envs/point/lib/python3.12/site-packages/deepspeed/"
              "runtime/zero/partition_parameters.py", "line": 1315},
             {"name": "train", "filename": "/job/train.py", "line": 88}]
    behind = [{"name": "all_gather_into_tensor", "filename": TORCH, "line": 4186},
              {"name": "step", "filename": "/envs/point/lib/python3.12/site-packages/deepspeed/runtime/engine.py",
               "line": 1234},
              {"name": "train", "filename": "/job/train.py", "line": 91}]
    for rank in range(world):
        lead = rank < world // 2
        top = stuck_at if lead else stuck_at - 1
        frames = ahead if lead else behind
        entries = [_entry(s, "completed" if s < top else "scheduled", numel, frames) for s in range(first, top + 1)]
        dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
                "pg_status": {"0": {"last_completed_collective": top - 1}}, "entries": entries}
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump))
    return folder
