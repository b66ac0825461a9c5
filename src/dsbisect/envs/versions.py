"""Which releases of a package exist, in PEP 440 order, from an index or wheelhouses.

The index is read through its simple API (PEP 503/691) with pypi-simple; a
``--find-links`` wheelhouse is read from its file names.  ``--offline`` reads only the
wheelhouses.  Yanked releases are left out, and so are pre-releases unless asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from dsbisect.core.errors import ExternalFailure, InputError, RangeError
from dsbisect.core.files import DATA_LIMIT, read_small
from dsbisect.core.model import Case, IndexOptions
from dsbisect.envs import network

PYPI = "https://pypi.org/simple/"


@dataclass(frozen=True)
class Release:
    version: Version
    yanked: bool = False
    where: str = ""
    uploaded: datetime | None = field(default=None, compare=False)  # the index's first upload-time, if it says


def released(package: str, version: str, index: IndexOptions) -> datetime | None:
    """When the index first got a file of ``package==version`` (None offline, or if it does not say)."""
    if index.offline:
        return None
    for url in (*index.extra_index_urls, default_index(index)):
        for rel in _index(url, canonicalize_name(package)):
            if str(rel.version) == str(parse(version)) and rel.uploaded is not None:
                return rel.uploaded
    return None


def release_list(package: str, index: IndexOptions) -> tuple[list[Version], str] | None:
    """The releases of ``package`` (yanked ones too) and where they were listed; None when that
    cannot be told here (no such project on the indexes, or an index out of reach): a check that
    a version exists, which must never fail because the network is gone."""
    try:
        found = releases(package, index, timeout=10.0)
    except ExternalFailure:
        return None
    return ([r.version for r in found], _where(index)) if found else None


def default_index(index: IndexOptions) -> str:
    """The default index of these (already resolved: see indexes.resolve) options."""
    return index.index_url or PYPI


def releases(package: str, index: IndexOptions, timeout: float = 60.0) -> list[Release]:
    """Every release of ``package`` that uv could install with these options, sorted,
    deduplicated: the wheelhouses' and, as uv's index strategy goes, the first index (extra
    indexes before the default) that has the project, or every index (unsafe-* strategies)."""
    found: dict[Version, Release] = {}
    for d in index.find_links:
        for rel in _wheelhouse(Path(d), canonicalize_name(package)):
            found.setdefault(rel.version, rel)
    if not index.offline:
        every = (index.strategy or "first-index").startswith("unsafe")
        for url in (*index.extra_index_urls, default_index(index)):
            listed = _index(url, canonicalize_name(package), timeout)
            for rel in listed:
                prev = found.get(rel.version)
                if prev is None or (prev.yanked and not rel.yanked):
                    found[rel.version] = rel
            if listed and not every:
                break
    return [found[v] for v in sorted(found)]


def listed(package: str, index: IndexOptions, pre: bool = False) -> list[Version]:
    """Every release a bisection could use (not yanked; final unless ``pre``), oldest first."""
    rels = [r.version for r in releases(package, index) if not r.yanked and (pre or not r.version.is_prerelease)]
    if not rels:
        raise InputError(f"{package}: no releases found on {_where(index)}{did_you_mean(package, index)}")
    return rels


# Packages dsbisect is for, and those their jobs move most: a misspelling of one is named.
KNOWN = ("deepspeed", "transformers", "accelerate", "torch", "peft", "trl", "datasets", "tokenizers",
         "safetensors", "huggingface-hub", "bitsandbytes", "flash-attn", "triton", "numpy", "pydantic", "megatron-core",
         "apex", "xformers", "vllm", "torchvision", "lightning", "pytorch-lightning", "diffusers", "optimum", "evaluate")


def did_you_mean(package: str, index: IndexOptions) -> str:
    """`` (did you mean deepspeed?)`` for a name no index knows that is close to one dsbisect
    knows of: the common ones, those installed here, those in the wheelhouses; "" for none."""
    import difflib
    from importlib import metadata

    name = canonicalize_name(package)
    known = set(KNOWN) | {canonicalize_name(d.metadata["Name"] or "") for d in metadata.distributions()}
    for d in index.find_links:
        try:
            known |= {found[0] for f in Path(d).iterdir() if (found := dist_file(f.name))}
        except OSError:
            continue
    close = difflib.get_close_matches(name, sorted(known - {name, ""}), n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


LATEST = "latest"  # BAD: the newest release the index or wheelhouse offers
AUTO = "auto"  # GOOD: found by walking back from BAD (see bisection)


def candidates(package: str, good: str, bad: str, index: IndexOptions, pre: bool = False,
               include_yanked: bool = False) -> list[Version]:
    """The releases from ``good`` to ``bad`` inclusive (either order of age, see find-fix).

    ``bad`` may be ``latest``; ``good`` may be ``auto``: then every release up to ``bad``.
    Yanked releases are left out unless ``include_yanked``, pre-releases unless ``pre``; the ends
    are always in.
    """
    rels = releases(package, index)
    if not rels:
        raise InputError(f"{package}: no releases found on {_where(index)}{did_you_mean(package, index)}")
    usable = [r for r in rels if (include_yanked or not r.yanked) and (pre or not r.version.is_prerelease)]
    b = _latest(package, usable, index) if bad == LATEST else parse(bad)
    g = usable[0].version if good == AUTO and usable else parse(good)
    if good != AUTO:
        if g == b:
            raise RangeError(f"good and bad are the same version ({good})")
        if g > b:
            raise RangeError(f"good {good} is newer than bad {b}: the good end must be the older "
                             "(to find the release that fixed a bug, use --find-fix)")
    known = {r.version for r in rels}
    for v, what in ((g, "good"), (b, "bad")):
        if v not in known:
            raise RangeError(f"{package}=={v} ({what} end) is not on {_where(index)}")
    picked = {r.version for r in usable if g <= r.version <= b} | {g, b}
    if len(picked) < 2:
        raise RangeError(f"{package}: no release before {b} to start from")
    return sorted(picked)


def _latest(package: str, usable: list[Release], index: IndexOptions) -> Version:
    if not usable:
        raise InputError(f"{package}: no usable release on {_where(index)}")
    return usable[-1].version


def gaps(package: str, old: str, new: str, index: IndexOptions, pre: bool, include_yanked: bool) -> list[str]:
    """What lies between two adjacent candidates and was not tested: yanked releases (unless
    included), pre-releases (unless --pre), and, offline, releases the index has that the
    wheelhouses lack (when the index can be reached).  One sentence each."""
    lo, hi = parse(old), parse(new)
    between = [r for r in releases(package, index) if lo < r.version < hi]
    notes = []
    yanked = [str(r.version) for r in between if r.yanked and not include_yanked]
    if yanked:
        notes.append(f"{', '.join(yanked)} (yanked) {_lie(yanked)} between {old} and {new} and "
                     f"{'was' if len(yanked) == 1 else 'were'} not tested; --include-yanked tests "
                     f"{'it' if len(yanked) == 1 else 'them'}")
    pres = [str(r.version) for r in between if r.version.is_prerelease and not r.yanked and not pre]
    if pres:
        notes.append(f"pre-release(s) {', '.join(pres)} {_lie(pres)} between {old} and {new} and were not tested; "
                     "--pre tests them")
    if index.offline:
        missing = _missing_from_wheelhouse(package, lo, hi, {r.version for r in between}, pre)
        if missing:
            notes.append(f"the index has {', '.join(missing)} between {old} and {new}, which the wheelhouse "
                         "lacks: those were not tested")
    return notes


def _lie(items: list[str]) -> str:
    return "lies" if len(items) == 1 else "lie"


def _missing_from_wheelhouse(package: str, lo: Version, hi: Version, have: set[Version], pre: bool) -> list[str]:
    """Releases between lo and hi the default index has and the wheelhouse lacks; [] when the
    index cannot be reached (an offline machine: the look is best effort, never a failure)."""
    try:
        online = _index_cached(default_index(IndexOptions()), canonicalize_name(package), 5.0, patient=False)
    except (InputError, ExternalFailure):
        return []
    return [str(r.version) for r in sorted(online, key=lambda r: r.version)
            if lo < r.version < hi and r.version not in have and not r.yanked and (pre or not r.version.is_prerelease)]


def parse(v: str) -> Version:
    try:
        return Version(v)
    except InvalidVersion:
        raise InputError(f"{v!r} is not a version (PEP 440)") from None


def check_points(cases: list[Case], index: IndexOptions) -> None:
    """Every version on the cases' axes exists: a typo is bad input, not a SKIP later."""
    wanted: dict[str, set[str]] = {}
    for c in cases:
        for p in c.points:
            for name, version in p.versions:
                wanted.setdefault(name, set()).add(version)
    for name, versions in wanted.items():
        known = {r.version for r in releases(name, index)}
        for v in sorted(versions):
            if Version(v) not in known:
                hint = did_you_mean(name, index) if not known else ""
                raise InputError(f"{name}=={v} is not on {_where(index)}{hint}; check the matrix's axes")


def _where(index: IndexOptions) -> str:
    places = [f"the wheelhouse {d}" for d in index.find_links]
    if not index.offline:
        places.insert(0, f"the index {default_index(index)}")
    return " or ".join(places) or "any index"


def _wheelhouse(folder: Path, name: str) -> list[Release]:
    out = []
    if not folder.is_dir():
        return out
    for f in folder.iterdir():
        parsed = dist_file(f.name)
        if parsed and parsed[0] == name:
            out.append(Release(parsed[1], False, str(folder)))
    return out


def dist_file(filename: str) -> tuple[str, Version] | None:
    """(canonical name, version) of a wheel or sdist file name; None for anything else."""
    try:
        if filename.endswith(".whl"):
            n, v, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            n, v = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return n, Version(str(v))


def file_is(filename: str, name: str, version: str) -> bool:
    """Is ``filename`` a wheel or sdist of ``name==version``?"""
    parsed = dist_file(filename)
    return parsed is not None and parsed[0] == canonicalize_name(name) and str(parsed[1]) == str(version)


def exact_version(req: Requirement) -> str | None:
    """The version of a ``name==X`` requirement (None for ranges and wildcards)."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _bad_url_errors() -> tuple[type[Exception], ...]:
    import requests

    return requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema, requests.exceptions.InvalidURL


@lru_cache(maxsize=64)
def _index_cached(url: str, name: str, timeout: float = 60.0, patient: bool = True) -> tuple[Release, ...]:
    """The releases an index lists for ``name``; ``patient``: a transient network error is tried
    again (envs.network) before it is an ExternalFailure (a best-effort look is not patient)."""
    import requests
    from pypi_simple import NoSuchProjectError, UnsupportedContentTypeError

    try:
        if url.startswith("file:"):
            page = _local_page(url, name)
        else:
            page = network.retried(lambda: _project_page(url, name, timeout), f"reading {name} from the index {url}",
                                   network.http_cause, (requests.RequestException,), None if patient else ())
    except NoSuchProjectError:
        return ()
    except _bad_url_errors() as e:  # the URL given cannot name an index: bad input
        raise InputError(f"the index {url} is not a usable URL ({type(e).__name__}: {e})") from None
    except (UnsupportedContentTypeError, ValueError) as e:  # it answered, with no package index
        raise InputError(f"cannot read {name} from the index {url} ({type(e).__name__}: {e}): is it a "
                         "simple (PEP 503/691) index?") from None
    except requests.RequestException as e:  # unreachable, refused, timed out, a server error: not the input's fault
        raise ExternalFailure(f"cannot read {name} from the index {url} ({type(e).__name__}: {e}); "
                              "use --offline --find-links DIR without a network") from None
    by_version: dict[Version, list[bool]] = {}
    uploaded: dict[Version, datetime] = {}
    for pkg in page.packages:
        if not pkg.version:
            continue
        try:
            v = Version(pkg.version)
        except InvalidVersion:
            continue
        by_version.setdefault(v, []).append(bool(pkg.is_yanked))
        when = getattr(pkg, "upload_time", None)
        if isinstance(when, datetime) and (v not in uploaded or when < uploaded[v]):
            uploaded[v] = when
    return tuple(Release(v, all(ys), url, uploaded.get(v)) for v, ys in by_version.items())


def _project_page(url: str, name: str, timeout: float):
    from pypi_simple import PyPISimple

    with PyPISimple(endpoint=url) as client:
        return client.get_project_page(name, timeout=timeout)


def _local_page(url: str, name: str):
    """A project page of a simple index on disk (``file:///mirror/simple``), as uv reads it."""
    from urllib.parse import unquote, urlparse

    from pypi_simple import NoSuchProjectError, ProjectPage

    folder = Path(unquote(urlparse(url).path)) / name
    page = folder / "index.html"
    if not page.is_file():
        raise NoSuchProjectError(name, url)
    return ProjectPage.from_html(name, read_small(page, DATA_LIMIT), base_url=folder.as_uri() + "/")


def _index(url: str, name: str, timeout: float = 60.0) -> list[Release]:
    return list(_index_cached(url, name, timeout))
