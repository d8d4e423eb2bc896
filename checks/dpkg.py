"""dpkg's status file (/var/lib/dpkg/status): which packages are installed, at what version.

The file is a list of deb822 paragraphs separated by blank lines (deb-control(5)), one per
package. Its Status field is three words, "want error-flag status" (dpkg-query(1), the
db:Status-Abbrev / Status fields; dpkg(1), "PACKAGE STATES" and "PACKAGE SELECTION STATES"):
want is unknown|install|hold|deinstall|purge, the error flag ok|reinstreq, the status one of
not-installed, config-files, half-installed, unpacked, half-configured, triggers-awaited,
triggers-pending, installed. Only the third word says whether the package is installed; the
word "installed" inside "not-installed" or "half-installed" does not.
"""
from typing import Dict, Iterable, Iterator, Optional, Tuple

# dpkg(1): "installed: the package is correctly unpacked and configured"; "triggers-awaited"
# and "triggers-pending" are reached only after configuration (the package's own files are
# in place and configured; another package's trigger, e.g. ldconfig or man-db, has yet to
# run), so the package's binaries work and its version is the one on disk. "unpacked",
# "half-configured", "half-installed" are not configured; "config-files" and
# "not-installed" have no binaries at all.
INSTALLED_STATES = frozenset({"installed", "triggers-awaited", "triggers-pending"})


def status_installed(status: str) -> bool:
    """Whether a Status field value ("install ok installed") means installed and usable.

    The error flag must be "ok": "reinstreq" is dpkg(1)'s "broken and requires
    reinstallation", whatever the status word."""
    words = status.split()
    return len(words) == 3 and words[1] == "ok" and words[2] in INSTALLED_STATES


def paragraphs(text: str) -> Iterator[Dict[str, str]]:
    """Each paragraph's top-level fields (continuation lines, which start with a space or a
    tab in deb-control(5), are skipped; a repeated field keeps its first value)."""
    for stanza in text.split("\n\n"):
        fields: Dict[str, str] = {}
        for line in stanza.splitlines():
            if not line or line[0] in " \t":
                continue
            name, sep, value = line.partition(":")
            if sep:
                fields.setdefault(name.strip(), value.strip())
        if fields:
            yield fields


def installed_versions(text: str, packages: Iterable[str]) -> Iterator[Tuple[str, str]]:
    """(package, Version) of each installed paragraph of one of ``packages``, in file order."""
    wanted = frozenset(packages)
    for fields in paragraphs(text):
        name = fields.get("Package")
        version = fields.get("Version")
        if name in wanted and version and status_installed(fields.get("Status", "")):
            yield name, version


def installed_version(text: str, package: str) -> Optional[str]:
    """The installed version of ``package``, or None when dpkg records none installed."""
    return next((v for _, v in installed_versions(text, (package,))), None)
