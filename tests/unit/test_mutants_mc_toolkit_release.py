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


# deb-version(5): "[epoch:]upstream_version[-debian_revision]"; the debian_revision is the part
# after the LAST hyphen, and the upstream_version may contain hyphens only when a revision is
# present. dpkg compares the upstream part as alternating non-digit and digit runs, so within
# "rc.1-beta" the hyphen separates runs as the dot does: rc, 1, beta.
RC1_BETA = ((1, 0, "rc"), (0, 1, ""), (1, 0, "beta"))


@pytest.mark.parametrize("text, version", [
    # upstream 1.18.0~rc.1-beta, revision 1 (the first hyphen is the upstream's own)
    ("1.18.0~rc.1-beta-1", (1, 18, 0, 0, RC1_BETA)),
    # upstream 1.18.0~rc.1-beta-2, revision 10: only the last hyphen starts the revision
    ("1.18.0~rc.1-beta-2-10", (1, 18, 0, 0, RC1_BETA + ((0, 2, ""),))),
    # no hyphen: no revision, the whole tilde part is the pre-release
    ("1.18.0~rc.1", (1, 18, 0, 0, RC1)),
    # one hyphen: it is the revision's, as before
    ("1.18.0~rc.1-1", (1, 18, 0, 0, RC1)),
    # a plain release with its revision
    ("1.17.8-1", (1, 17, 8, 1, ())),
])
def test_the_debian_revision_is_after_the_last_hyphen(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("lower, higher", [
    # dpkg --compare-versions order: rc.1 < rc.1-beta (a "-" run sorts after the end of the
    # string) < rc.2 (digit run 1 < 2) < the release (a "~" sorts before the end).
    ("1.18.0~rc.1-1", "1.18.0~rc.1-beta-1"),
    ("1.18.0~rc.1-beta-1", "1.18.0~rc.2-1"),
    ("1.18.0~rc.1-beta-1", "1.18.0-1"),
    ("1.17.8-1", "1.18.0~rc.1-beta-1"),
])
def test_a_hyphen_in_the_upstream_part_orders_as_dpkg_does(lower, higher):
    a, b = parse_version(lower), parse_version(higher)
    assert a is not None and b is not None and a < b


def test_a_hyphenated_candidate_is_shown_with_its_whole_upstream_part():
    v = parse_version("1.18.0~rc.1-beta-1")
    assert v is not None and version_text(v) == "1.18.0-rc.1.beta"
