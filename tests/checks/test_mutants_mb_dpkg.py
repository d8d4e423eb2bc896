"""checks/dpkg.py: field names and values as deb-control(5) writes them.

deb-control(5): a field is "name: value"; the name ends at the first colon, so a value may hold
colons itself (a Version's epoch, deb-version(7): "[epoch:]upstream_version[-debian_revision]").
Continuation lines start with a space or a tab; any other first character starts a field, user
fields (X-, XB-, XC-, XS- prefixes) included.
"""
from checks.dpkg import installed_version, paragraphs

STATUS = """\
Package: containerd
Status: install ok installed
Version: 1:1.7.24~ds1-6
Description: daemon
 a continuation line: not a field

Package: runc
X-Origin: local
Status: install ok installed
Version: 1.1.12-1
"""


def test_a_version_with_an_epoch_keeps_it():
    assert installed_version(STATUS, "containerd") == "1:1.7.24~ds1-6"


def test_fields_are_split_at_the_first_colon_and_user_fields_kept():
    assert list(paragraphs(STATUS)) == [
        {"Package": "containerd", "Status": "install ok installed",
         "Version": "1:1.7.24~ds1-6", "Description": "daemon"},
        {"Package": "runc", "X-Origin": "local", "Status": "install ok installed",
         "Version": "1.1.12-1"},
    ]
