"""checks/toolkit_release.py: the Version tuple each printed form parses to, its text, and the
order (pre-releases below their release).

Expected tuples written by hand from the module's documented layout (major, minor, patch,
0 = pre-release | 1 = release, identifiers as (0, number, "") or (1, 0, text)) and the sources
it cites: semver.org 2.0.0 §9/§11 ("1.18.0-rc.1" < "1.18.0"; numeric identifiers compare as
numbers, below alphanumeric ones), deb-version(5) and rpm's "~" (sorts before the release),
NVIDIA's rpm spec releasing a candidate as RELEASE "0.1.rc.1".
"""
import pytest

from checks.toolkit_release import parse_version, version_text

RC1 = ((1, 0, "rc"), (0, 1, ""))


@pytest.mark.parametrize("text, version", [
    ("1.18.0", (1, 18, 0, 1, ())),
    ("v1.17", (1, 17, 0, 1, ())),
    ("NVIDIA Container Toolkit CLI version 1.18.0-rc.1\ncommit: abc", (1, 18, 0, 0, RC1)),
    ("1.18.0~rc.1-1", (1, 18, 0, 0, RC1)),
    ("1.18.0~-1", (1, 18, 0, 0, ((1, 0, "~"),))),
    ("1.18.0-1", (1, 18, 0, 1, ())),
    ("1.3.0-0.1.rc.2", (1, 3, 0, 0, ((1, 0, "rc"), (0, 2, "")))),
    ("1.3.0-0.1.2", (1, 3, 0, 1, ())),
    ("1.18.0+build.5", (1, 18, 0, 1, ())),
    ("1.18.0-beta+exp.sha", (1, 18, 0, 0, ((1, 0, "beta"), (1, 0, "exp"), (1, 0, "sha")))),
    ("1.18.0-alpha.10", (1, 18, 0, 0, ((1, 0, "alpha"), (0, 10, "")))),
    # A letter right after "-" is a semver pre-release, whatever follows it.
    ("1.18.0-r1", (1, 18, 0, 0, ((1, 0, "r1"),))),
])
def test_parsed_versions(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("text", [None, "", "version unknown", "1", "v1"])
def test_no_version(text):
    assert parse_version(text) is None


def test_at_most_eight_identifiers_are_kept():
    got = parse_version("1.0.0-a.b.c.d.e.f.g.h.i.j")
    assert got == (1, 0, 0, 0, tuple((1, 0, x) for x in "abcdefgh"))


def test_an_identifier_is_cut_at_thirty_two_characters():
    got = parse_version("1.0.0-" + "r" * 40)
    assert got == (1, 0, 0, 0, ((1, 0, "r" * 32),))


@pytest.mark.parametrize("lower, higher", [
    ("1.18.0-rc.1", "1.18.0"),
    ("1.18.0~rc.1-1", "1.18.0-1"),
    ("1.3.0-0.1.rc.2", "1.3.0-1"),
    ("1.18.0-rc.1", "1.18.0-rc.2"),
    ("1.18.0-rc.9", "1.18.0-rc.10"),
    ("1.18.0-alpha.1", "1.18.0-alpha.beta"),
    ("1.18.0-alpha", "1.18.0-alpha.1"),
    ("1.17.8", "1.18.0-rc.1"),
])
def test_order(lower, higher):
    a, b = parse_version(lower), parse_version(higher)
    assert a is not None and b is not None and a < b


@pytest.mark.parametrize("text, shown", [
    ("1.18", "1.18.0"), ("1.18.0-1", "1.18.0"), ("1.18.0~rc.1-1", "1.18.0-rc.1"),
    ("1.3.0-0.1.rc.2", "1.3.0-rc.2"), ("1.18.0-beta+exp", "1.18.0-beta.exp"),
    ("1.18.0~-1", "1.18.0-~"),
])
def test_version_text(text, shown):
    v = parse_version(text)
    assert v is not None and version_text(v) == shown
