"""Releases from wheelhouses and from a real (local, http) simple index: order, ends, yanked, pre-releases."""

from __future__ import annotations

import pytest

import toypkg
from dsbisect.core.errors import InputError, RangeError
from dsbisect.core.model import IndexOptions
from dsbisect.envs.versions import candidates, dist_file, exact_version, file_is, listed, releases

RELEASES = {"1.0.0": "ok", "1.1.0": "ok", "1.10.0": "ok", "1.2.0rc1": "ok", "1.2.0": "ok", "2.0.0": "ok"}


@pytest.fixture
def house(tmp_path):
    toypkg.build_wheelhouse(tmp_path / "house", RELEASES, dist="dsb-ver")
    (tmp_path / "house" / "dsb_ver-0.9.0.tar.gz").write_bytes(b"")  # an sdist counts too
    (tmp_path / "house" / "not-a-dist.txt").write_text("")
    return IndexOptions(offline=True, find_links=(str(tmp_path / "house"),))


def test_wheelhouse_releases_in_pep440_order(house):
    assert [str(r.version) for r in releases("dsb-ver", house)] == [
        "0.9.0", "1.0.0", "1.1.0", "1.2.0rc1", "1.2.0", "1.10.0", "2.0.0"]
    assert [str(v) for v in listed("dsb_ver", house)] == ["0.9.0", "1.0.0", "1.1.0", "1.2.0", "1.10.0", "2.0.0"]
    assert "1.2.0rc1" in [str(v) for v in listed("dsb-ver", house, pre=True)]


def test_candidates_run_from_good_to_bad_inclusive(house):
    assert [str(v) for v in candidates("dsb-ver", "1.1.0", "1.10.0", house)] == ["1.1.0", "1.2.0", "1.10.0"]
    assert [str(v) for v in candidates("dsb-ver", "1.1.0", "1.10.0", house, pre=True)] == [
        "1.1.0", "1.2.0rc1", "1.2.0", "1.10.0"]


@pytest.mark.parametrize("good, bad, message, kind", [
    ("1.1.0", "1.1.0", "good and bad are the same version (1.1.0)", RangeError),
    ("2.0.0", "1.0.0", "good 2.0.0 is newer than bad 1.0.0", RangeError),
    ("1.0.0", "3.0.0", "dsb-ver==3.0.0 (bad end) is not on the wheelhouse", RangeError),
    ("abc", "1.0.0", "'abc' is not a version (PEP 440)", InputError),  # not a range yet: a word
])
def test_bad_ranges_are_named(house, good, bad, message, kind):
    with pytest.raises(InputError) as e:
        candidates("dsb-ver", good, bad, house)
    assert message in str(e.value)
    assert type(e.value) is kind and e.value.exit_code == 2


def test_unknown_package_is_bad_input(house):
    with pytest.raises(InputError, match="ghost: no releases found on the wheelhouse"):
        listed("ghost", house)


def test_index_over_http_leaves_yanked_releases_out(tmp_path, simple_index):
    for version in ("3.0.0", "3.1.0", "3.2.0", "3.3.0"):
        wheel = toypkg.build_wheel(tmp_path / "w", version, "ok", dist="dsb-http")
        simple_index.add(wheel, yanked="broken upload" if version == "3.1.0" else "")
    index = IndexOptions(index_url=simple_index.url)
    rels = {str(r.version): r.yanked for r in releases("dsb-http", index)}
    assert rels == {"3.0.0": False, "3.1.0": True, "3.2.0": False, "3.3.0": False}
    assert [str(v) for v in candidates("dsb-http", "3.0.0", "3.3.0", index)] == ["3.0.0", "3.2.0", "3.3.0"]


def test_file_names_and_exact_pins():
    from packaging.requirements import Requirement

    assert dist_file("dsb_ver-1.2.0-py3-none-any.whl")[0] == "dsb-ver"
    assert dist_file("deepspeed-0.12.4.tar.gz")[0] == "deepspeed" and dist_file("README.md") is None
    assert file_is("dsb_ver-1.2.0-py3-none-any.whl", "DSB.ver", "1.2.0")
    assert not file_is("dsb_ver-1.2.0-py3-none-any.whl", "dsb-ver", "1.2")  # names, not equal versions
    assert exact_version(Requirement("deepspeed==0.12.4")) == "0.12.4"
    assert exact_version(Requirement("deepspeed==0.12.*")) is None
    assert exact_version(Requirement("deepspeed>=0.12")) is None


@pytest.mark.parametrize("asked, said", [
    ("deepseed", " (did you mean deepspeed?)"),  # a package dsbisect is for
    ("dsb-verr", " (did you mean dsb-ver?)"),  # one of the wheelhouse
    ("ghost", ""),  # close to nothing: no guess
])
def test_a_misspelled_package_is_named_with_what_it_likely_meant(house, asked, said):
    with pytest.raises(InputError) as e:
        candidates(asked, "1.0.0", "1.1.0", house)
    assert str(e.value).endswith(f"no releases found on the wheelhouse {house.find_links[0]}{said}")
