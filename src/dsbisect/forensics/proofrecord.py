"""The early deadlock verdict's proof as a run folder keeps it (``fr/proof.json``): ``ProofRecord``.

``launch.rounds`` writes it once a round proved a deadlock (``ProofRecord.of`` a
``deadlock.Proof`` and the two snapshots it stands on); ``dsbisect show`` and the HTML report
read it back (``from_json``: None for a file that is no proof; a value of another shape inside
one is passed over).  ``to_json`` writes the keys every dsbisect wrote.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dsbisect.forensics.deadlock import Proof, Snapshot

__all__ = ["Looked", "ProofRecord", "StoreWaitSeen"]

_NUM = (int, float)


def _number(value: object) -> float | None:
    return value if isinstance(value, _NUM) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Looked:
    """One of the two snapshots: the request's number, when (seconds since the launch), and
    what each rank did (``RankSnapshot.describe``), by rank."""

    request: int | None
    at: float | None
    ranks: tuple[tuple[str, str], ...]  # (rank as recorded, what it did)

    def to_json(self) -> dict:
        return {"request": self.request, "at": self.at, "ranks": dict(self.ranks)}

    @classmethod
    def from_json(cls, d: Mapping) -> Looked:
        ranks = d.get("ranks") if isinstance(d.get("ranks"), Mapping) else {}
        request = d.get("request")
        return cls(request if isinstance(request, int) and not isinstance(request, bool) else None,
                   _number(d.get("at")), tuple((str(r), str(s)) for r, s in ranks.items()))

    def by_rank(self) -> list[tuple[str, str]]:
        """The ranks in rank order (a key that is no number first)."""
        return sorted(self.ranks, key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)


@dataclass(frozen=True)
class StoreWaitSeen:
    """A rank blocked on the c10d store, as the proof recorded it."""

    label: str
    key: str
    ranks: tuple[int, ...]
    joined: object  # as ``deadlock.StoreWait.joined`` was

    def to_json(self) -> dict:
        return {"label": self.label, "key": self.key, "ranks": list(self.ranks), "joined": self.joined}

    @classmethod
    def from_json(cls, d: Mapping) -> StoreWaitSeen:
        ranks = d.get("ranks")
        return cls(str(d.get("label", "")), str(d.get("key", "")),
                   tuple(r for r in ranks if isinstance(r, int)) if isinstance(ranks, list) else (), d.get("joined"))


@dataclass(frozen=True)
class ProofRecord:
    """``fr/proof.json``: the proof's sentence and rule, when it was proven, the requests (and
    snapshots) it stands on, the ranks gone, what each blocked rank waited in."""

    text: str
    rule: str
    at: float | None
    requests: tuple[int, ...]
    wall_time: float | None = None
    gone: tuple[int, ...] = ()
    waits: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (rank, the labels of its heads)
    store_waits: tuple[tuple[str, StoreWaitSeen], ...] = ()
    snapshots: tuple[Looked, ...] = ()

    @classmethod
    def of(cls, proof: Proof, requests: tuple[int, int], snapshots: tuple[Snapshot, Snapshot],
           wall_time: float) -> ProofRecord:
        """What a round that proved a deadlock writes."""
        return cls(proof.text, proof.rule, round(proof.at, 2), tuple(requests), wall_time, tuple(proof.gone),
                   tuple((str(r), tuple(c.label for c in heads)) for r, heads in proof.waits),
                   tuple((str(r), StoreWaitSeen(w.label, w.key, tuple(w.ranks), w.joined)) for r, w in proof.stores),
                   tuple(Looked(n, round(snap.at, 2), tuple((str(s.rank), s.describe()) for s in snap.ranks))
                         for n, snap in zip(requests, snapshots)))

    def looked_at(self, request: int) -> Looked | None:
        """The snapshot of ``request``, when the proof recorded it."""
        return next((s for s in self.snapshots if s.request == request), None)

    def to_json(self) -> dict:
        return {"text": self.text, "rule": self.rule, "at": self.at, "requests": list(self.requests),
                "wall_time": self.wall_time, "gone": list(self.gone),
                "waits": {r: list(labels) for r, labels in self.waits},
                "store_waits": {r: w.to_json() for r, w in self.store_waits},
                "snapshots": [s.to_json() for s in self.snapshots]}

    @classmethod
    def from_json(cls, d: object) -> ProofRecord | None:
        """The proof a run folder keeps; None for a file that is none (no object, no requests)."""
        if not isinstance(d, Mapping) or not isinstance(d.get("requests"), list):
            return None
        waits = d.get("waits") if isinstance(d.get("waits"), Mapping) else {}
        stores = d.get("store_waits") if isinstance(d.get("store_waits"), Mapping) else {}
        snaps = d.get("snapshots") if isinstance(d.get("snapshots"), list) else []
        gone = d.get("gone") if isinstance(d.get("gone"), list) else []
        return cls(str(d.get("text", "")), str(d.get("rule", "")), _number(d.get("at")),
                   tuple(n for n in d["requests"] if isinstance(n, int) and not isinstance(n, bool)),
                   _number(d.get("wall_time")), tuple(g for g in gone if isinstance(g, int)),
                   tuple((str(r), tuple(map(str, ls))) for r, ls in waits.items() if isinstance(ls, list)),
                   tuple((str(r), StoreWaitSeen.from_json(w)) for r, w in stores.items() if isinstance(w, Mapping)),
                   tuple(Looked.from_json(s) for s in snaps if isinstance(s, Mapping)))
