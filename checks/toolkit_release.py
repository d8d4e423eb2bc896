"""The NVIDIA Container Toolkit's version strings, compared with pre-releases below their
release.

Versions as the tools print them, compared with pre-releases below their release:
- `nvidia-ctk --version`: "1.18.0-rc.1", semantic versioning (semver.org 2.0.0 §9, §11: a
  pre-release "-rc.1" has lower precedence than "1.18.0");
- dpkg: NVIDIA's packages version a candidate "1.18.0~rc.1-1" (deb-version(5): "~" sorts
  before anything, even the end of the part, so 1.18.0~rc.1 < 1.18.0), "-1" the revision;
- rpm: NVIDIA's spec releases a candidate as VERSION 1.18.0, RELEASE "0.1.rc.1" and the
  release as RELEASE "1" (NVIDIA/nvidia-container-toolkit packaging/rpm/SPECS/
  nvidia-container-toolkit.spec changelog, "Promote 1.3.0-0.1.rc.2 to 1.3.0-1"); rpm also
  sorts "~" first (rpm lib/rpmvercmp.c, "~" handling; rpm.org "RPM Version Comparison").
"""
import re
from typing import Optional, Tuple

_VERSION = re.compile(r"v?(\d{1,6})\.(\d{1,6})(?:\.(\d{1,6}))?(\S*)")
_RPM_CANDIDATE = re.compile(r"0\.\d+\.(.*[A-Za-z].*)$")
Pre = Tuple[Tuple[int, int, str], ...]
# (major, minor, patch, 0 = pre-release | 1 = release, pre-release identifiers)
Version = Tuple[int, int, int, int, Pre]


def _identifiers(pre: str) -> Pre:
    """semver.org §11.4: numeric identifiers compare as numbers and below alphanumeric ones."""
    out = []
    for part in re.split(r"[.+]", pre)[:8]:
        out.append((0, int(part), "") if part.isdigit() else (1, 0, part[:32]))
    return tuple(out)


def parse_version(text: Optional[str]) -> Optional[Version]:
    """The toolkit version in ``text`` as nvidia-ctk, dpkg or rpm print it; None if none."""
    m = _VERSION.search(text or "")
    if not m:
        return None
    rest, pre = m.group(4), ""
    if rest.startswith("~"):  # deb-version(5) / rpm tilde: "1.18.0~rc.1-1"
        # deb-version(5): the debian_revision is what follows the LAST hyphen; the
        # upstream_version may hold hyphens when a revision is present ("1.18.0~rc.1-beta-1"
        # is upstream 1.18.0~rc.1-beta, revision 1). dpkg compares the upstream part in
        # alternating non-digit and digit runs, so a hyphen there separates identifiers as a
        # dot does ("rc.1-beta" orders as rc, 1, beta: above rc.1, below rc.2).
        # (Without a hyphen there is no revision and rsplit keeps the whole part.)
        upstream = rest[1:].rsplit("-", 1)[0]
        pre = upstream.replace("-", ".") or "~"
    elif rest.startswith("-"):
        tail = rest[1:]
        if tail[:1].isalpha():  # semver pre-release "1.18.0-rc.1"
            pre = tail
        else:  # a package revision: "-1" releases, NVIDIA's rpm "-0.1.rc.1" is a candidate
            cand = _RPM_CANDIDATE.match(tail)
            pre = cand.group(1) if cand else ""
    core = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    return (*core, 0 if pre else 1, _identifiers(pre) if pre else ())


def version_text(v: Version) -> str:
    core = ".".join(str(p) for p in v[:3])
    if v[3]:
        return core
    return core + "-" + ".".join(str(n) if kind == 0 else s for kind, n, s in v[4])
