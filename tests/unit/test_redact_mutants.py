"""agent/host/redact*.py helper by helper, with exact outputs for small inputs, so a changed regex,
boundary, offset or emitter option fails (the mutation tier found these blind before:
docs/testing.md). Every expected string is written by hand from the rule it checks: a secret
value becomes "REDACTED" (quoted as the original was, triple quotes as one basic string),
everything else on the line is kept byte for byte."""
import base64
import datetime
import math

import pytest

from agent.host import redact
from agent.host.redact import (
    REEMITTED_NOTE,
    TooLarge,
    _emit_json,
    _emit_toml,
    _emit_yaml,
    _emit_yaml_ascii,
    _leaks,
    _same,
    _Walker,
    kind_for,
    redact_command_output,
    redact_data,
    redact_document,
    redact_file,
)
from agent.host.redact_lines import (
    _bracket_end,
    _indent,
    _inline_pairs,
    _last_key,
    _quoted_redacted,
    _strings_redacted,
    redact_text,
)
from agent.host.redact_secrets import REDACTED, redact_inline
from agent.host.redact_toml import _toml_key, _toml_str, _toml_value, emit_toml

NAN = float("nan")
BEGIN = "-----BEGIN RSA PRIVATE KEY-----"
END = "-----END RSA PRIVATE KEY-----"


# -- _pem_sub: the block keeps its BEGIN line's indentation ----------------------------------
@pytest.mark.parametrize("text,expected", [
    # at the very start of the string: no indentation
    (f"{BEGIN}\nMIIE\n{END}", f"{BEGIN}\nREDACTED\n{END}"),
    # indented by blanks (a YAML block scalar): the written lines keep them
    (f"k: |\n  {BEGIN}\n  MIIE\n  {END}\n", f"k: |\n  {BEGIN}\n  REDACTED\n  {END}\n"),
    (f"x\n\t {BEGIN}\n\t MIIE\n\t {END}", f"x\n\t {BEGIN}\n\t REDACTED\n\t {END}"),
    # text before BEGIN on its line is not indentation
    (f"key: {BEGIN}\nMIIE\n{END} tail", f"key: {BEGIN}\nREDACTED\n{END} tail"),
    # only the BEGIN line's own indentation, not an earlier line's
    (f"a\nb\n  {BEGIN}\n  MIIE\n  {END}", f"a\nb\n  {BEGIN}\n  REDACTED\n  {END}"),
    (f"\n  {BEGIN}\n  MIIE\n  {END}", f"\n  {BEGIN}\n  REDACTED\n  {END}"),
    (f"X {BEGIN}\nMIIE\n{END}", f"X {BEGIN}\nREDACTED\n{END}"),
    # a carriage return is not a blank (strip(" \t") keeps it): no indentation either
    (f"\r{BEGIN}\nMIIE\n{END}", f"\r{BEGIN}\nREDACTED\n{END}"),
    # the label is the one the block had
    ("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",
     "-----BEGIN PRIVATE KEY-----\nREDACTED\n-----END PRIVATE KEY-----"),
    # unterminated: redacted to the end, closed with the same label
    (f"a\n  {BEGIN}\n  MIIE\n  more", f"a\n  {BEGIN}\n  REDACTED\n  {END}"),
])
def test_pem_block_replacement_keeps_label_and_indentation(text, expected):
    assert redact_inline(text) == expected


def test_pem_false_leaves_a_block_to_the_caller():
    text = f"{BEGIN}\nMIIE\n{END}"
    assert redact_inline(text, pem=False) == text


# -- _b64_pem_sub -----------------------------------------------------------------------------
# base64("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n") and base64("-----BEGIN CERTIFICATE-----\n"
# "MIIBszCCAVmgAwIBAgIU\n"), by `printf ... | base64 -w0`.
B64_KEY = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFCg=="
B64_CERT = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJzekNDQVZtZ0F3SUJBZ0lVCg=="


@pytest.mark.parametrize("text,expected", [
    (f"client-key-data: {B64_KEY}", "client-key-data: REDACTED"),
    # a certificate (no PRIVATE KEY in its first bytes, 20+ bytes decoded) is kept
    (f"certificate-authority-data: {B64_CERT}", f"certificate-authority-data: {B64_CERT}"),
    # "\\n" escapes inside a JSON string are part of the blob
    (f'"{B64_KEY[:20]}\\n{B64_KEY[20:]}"', '"REDACTED"'),
    (f'"{B64_KEY[:22]}\\n{B64_KEY[22:]}"', '"REDACTED"'),  # inside a 4-character group
    # too short to tell (under 20 bytes decoded): redacted
    ("x LS0tLS1CRUdJTiBY y", "x REDACTED y"),
])
def test_base64_pem(text, expected):
    assert redact_inline(text) == expected


# -- the inline rules ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("A_TOKEN=abc B=c", f"A_TOKEN={REDACTED} B=c"),
    ("HOME=/root", "HOME=/root"),
    ("Authorization: Bearer abcdefghijkl", "Authorization: Bearer REDACTED"),
    ("Bearer abcdefghijk", "Bearer abcdefghijk"),  # 11 characters: prose
    ("Basic dXNlcjpwYXNz", "Basic REDACTED"),
    ("Basic Settings", "Basic Settings"),
    ("https://u:pw@h/x", "https://u:REDACTED@h/x"),
    ("https://h/x?a=b", "https://h/x?a=b"),
])
def test_inline_rules(text, expected):
    assert redact_inline(text) == expected


# -- _bracket_end ------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("[]", 2),
    ("{}", 2),
    ("[1, 2] tail", 6),
    ("[a, [b]] tail", 8),
    ("{a = [1], b = {c = 2}}x", 22),
    ('["]", 1]', 8),  # a bracket inside a string does not close
    ("['}', 1}", 8),
    ('{a = """]\n}"""}', 15),
    ("[1, # ] in a comment\n 2]", 24),
    ("[1, # ]", -1),  # the comment runs to the end of the text
    ("[1,\n # ]\n 2]", 12),  # a comment after an earlier line break
    ("[X]", 3),
    ("[ # c\n]\n", 7),  # the comment ends at the first line break, not the last
    ("[X", -1),
    ("[1", -1),
    ("x", -1),
    ("]", -1),  # a closer before any opener never balances
    ("][]", -1),  # nor does one after it: depth goes -1, 0, -1
    ("", -1),
])
def test_bracket_end(text, expected):
    assert _bracket_end(text) == expected


# -- _last_key / _quoted_redacted / _strings_redacted / _indent -------------------------------
@pytest.mark.parametrize("key,expected", [
    ("password", "password"),
    ("a.b.token", "token"),
    ('a . "pass.word"', "pass.word"),
    ("a.'x y'", "x y"),
    ('""', ""),
    ("Xab", "Xab"),  # only a quote opens a quoted key
    ('"', '"'),
    ("", ""),
])
def test_last_key(key, expected):
    assert _last_key(key) == expected


@pytest.mark.parametrize("token,expected", [
    ('"abc"', '"REDACTED"'),
    ("'abc'", "'REDACTED'"),
    ('"""abc"""', '"REDACTED"'),
    ("'''abc'''", '"REDACTED"'),
    ("abc", "REDACTED"),
])
def test_quoted_redacted(token, expected):
    assert _quoted_redacted(token) == expected


def test_strings_redacted():
    assert _strings_redacted("""["a", 'b', 3, \"\"\"c\"\"\"]""") == \
        """["REDACTED", 'REDACTED', 3, "REDACTED"]"""


@pytest.mark.parametrize("line,expected", [
    ("x", 0), ("  x", 2), ("\t x", 2), ("\n", 0), ("", 0), ("   ", 3),
])
def test_indent(line, expected):
    assert _indent(line) == expected


# -- _inline_pairs -------------------------------------------------------------------------------
@pytest.mark.parametrize("line,expected", [
    ('x = { password = "p", user = "u" }', 'x = { password = "REDACTED", user = "u" }'),
    ('{"token": "t", "name": "n"}', '{"token": "REDACTED", "name": "n"}'),
    ("{'a.secret' = 'v'}", "{'a.secret' = 'REDACTED'}"),
    ('{password = "", token = \'\'}', '{password = "", token = \'\'}'),
    ('"password" "x"', '"password" "x"'),  # no separator: not a pair
])
def test_inline_pairs(line, expected):
    assert _inline_pairs(line) == expected


# -- _redact_field, through redact_text ------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    # quoted values keep their quotes, the rest of the line stays
    ('password = "abc"\n', 'password = "REDACTED"\n'),
    ("password: 'abc' # c\n", "password: 'REDACTED' # c\n"),
    ('  "token": "abc",\n', '  "token": "REDACTED",\n'),
    ('password = "abc"', 'password = "REDACTED"'),
    # bare values: up to a trailing comma or comment
    ("password: abc\n", "password: REDACTED\n"),
    ("password: abc  # c\n", "password: REDACTED  # c\n"),
    ("password: abc  \n", "password: REDACTED  \n"),
    ('  "token": 12345,\n', '  "token": REDACTED,\n'),
    ("password: abc#x\n", "password: REDACTED\n"),
    ("password: abc", "password: REDACTED"),
    ("password: X\n", "password: REDACTED\n"),
    ("password: Xyz\nuser: u\n", "password: REDACTED\nuser: u\n"),
    # a CRLF line: the value ends before the "\r" (the rewritten line ends in "\n")
    ('password = "abc"\r\n', 'password = "REDACTED"\n'),
    # the lead forms: comment, list item, dotted key
    ("# password = abc\n", "# password = REDACTED\n"),
    ("- password: abc\n", "- password: REDACTED\n"),
    ("a.b . token = abc\n", "a.b . token = REDACTED\n"),
    # kept: empty, null, anchors/aliases/tags, booleans
    ("password: \n", "password: \n"),
    ("password: null\n", "password: null\n"),
    ("password: ~\n", "password: ~\n"),
    ('password = ""\n', 'password = ""\n'),
    ("password: &a x\n", "password: &a x\n"),
    ("password: *a\n", "password: *a\n"),
    ("password: !!str x\n", "password: !!str x\n"),
    ("password: true\n", "password: true\n"),
    ("password: False,\n", "password: False,\n"),
    ("password: FALSE  # c\n", "password: FALSE  # c\n"),
    # not a secret key: untouched
    ("tls_key_file: /etc/key\n", "tls_key_file: /etc/key\n"),
])
def test_one_line_fields(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("text,expected", [
    # YAML block scalars: the more-indented lines and blank lines that follow are dropped
    ("password: |\n  line1\n  line2\nother: x\n", 'password: "REDACTED"\nother: x\n'),
    ("password: >-\n  a\n\n  b\nnext: 1\n", 'password: "REDACTED"\nnext: 1\n'),
    ("  password: |2 # c\n    a\n  next: 1\n", '  password: "REDACTED"\n  next: 1\n'),
    ("password: |\n  a", 'password: "REDACTED"\n'),
    ("password: |", 'password: "REDACTED"'),
    # a line at the same indentation ends the block (the list dash counts as indentation)
    ("- password: |\n  a\n- x\n", '- password: "REDACTED"\n- x\n'),
    ("  password: |\n  a\n", '  password: "REDACTED"\n  a\n'),
])
def test_block_scalars(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("text,expected", [
    ('password = """\nabc\ndef"""  # c\nx = 1\n', 'password = "REDACTED"  # c\nx = 1\n'),
    ("password = '''abc'''\nx = 1\n", 'password = "REDACTED"\nx = 1\n'),
    ("password = '''a\nb'''\nx = 1\n", 'password = "REDACTED"\nx = 1\n'),
    # the closing line's own newline decides, not the file's last line
    ('password = """a\nb"""\nx = 1', 'password = "REDACTED"\nx = 1'),
    # a private key after the string was already replaced before the line walk: not twice
    ('password = """a""" # -----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n',
     'password = "REDACTED" # -----BEGIN PRIVATE KEY-----\nREDACTED\n-----END PRIVATE KEY-----\n'),
    ('password = """a\nb"""', 'password = "REDACTED"'),
    ('x = 0\npassword = """a\nb""" , y\nz = 1\n', 'x = 0\npassword = "REDACTED" , y\nz = 1\n'),
    # the tail after the string still gets the inline rules
    ('password = """a""" # A_TOKEN=abc\n', 'password = "REDACTED" # A_TOKEN=REDACTED\n'),
    # never closed: the rest of the file is the secret
    ('password = """abc\nmore\nx = 1\n', 'password = "REDACTED"\n'),
    ('password = """abc', 'password = "REDACTED"'),
    # whitespace the lead does not take (a vertical tab) before the string
    ('password = \x0b"""a\nb"""\nx = 1\n', 'password = "REDACTED"\nx = 1\n'),
])
def test_multi_line_strings(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("text,expected", [
    ('password = ["a", "b"]  # c\n', 'password = ["REDACTED", "REDACTED"]  # c\n'),
    ('tokens = [\n  "a",\n  "b",\n]\nx = 1\n', 'tokens = [\n  "REDACTED",\n  "REDACTED",\n]\nx = 1\n'),
    ('auth = { user = "u", pw = "p" }\n', 'auth = { user = "REDACTED", pw = "REDACTED" }\n'),
    ('tokens = ["a"]', 'tokens = ["REDACTED"]'),
    ('tokens = ["a",\n "b"]\nx = 1', 'tokens = ["REDACTED",\n "REDACTED"]\nx = 1'),
    ('x = 1\ntokens = ["a",\n "b"] # t\ny = "c"', 'x = 1\ntokens = ["REDACTED",\n "REDACTED"] # t\ny = "c"'),
    ("tokens = [1, 2]\n", "tokens = [1, 2]\n"),  # no strings: nothing to replace
    # never closed: the rest of the file is the secret
    ('tokens = [\n "a",\n', "tokens = REDACTED\n"),
    ('tokens = ["a"', "tokens = REDACTED"),
    ('tokens = \x0b["a"]\n', 'tokens = ["REDACTED"]\n'),
])
def test_bracketed_values(text, expected):
    assert redact_text(text) == expected


def test_lines_without_a_hint_are_copied_and_others_get_inline_rules():
    text = 'name = "x"\nurl = "https://u:pw@h"\n{"token": "t"}\n'
    assert redact_text(text) == 'name = "x"\nurl = "https://u:REDACTED@h"\n{"token": "REDACTED"}\n'


# -- TOML emitter ---------------------------------------------------------------------------
def test_toml_str_escapes():
    s = 'a"b\\c\b\t\n\f\r\x01\x1f\x7f ~é'
    assert _toml_str(s) == '"a\\"b\\\\c\\b\\t\\n\\f\\r\\u0001\\u001f\\u007f ~é"'


@pytest.mark.parametrize("key,expected", [
    ("a-b_1", "a-b_1"), ("a.b", '"a.b"'), ("", '""'), ("a b", '"a b"'), ("é", '"é"'),
    ("a\n", '"a\\n"'),
])
def test_toml_key(key, expected):
    assert _toml_key(key) == expected


@pytest.mark.parametrize("value,expected", [
    (True, "true"), (False, "false"), (3, "3"), (-0, "0"), (1.5, "1.5"), (NAN, "nan"),
    (math.inf, "inf"), (-math.inf, "-inf"), ("x", '"x"'),
    (datetime.date(2024, 1, 2), "2024-01-02"),
    (datetime.time(3, 4, 5), "03:04:05"),
    (datetime.datetime(2024, 1, 2, 3, 4, 5), "2024-01-02T03:04:05"),
    ([], "[]"), ([1, "a", [True]], '[1, "a", [true]]'),
    ({}, "{}"), ({"a": 1, "b.c": {"d": []}}, '{ a = 1, "b.c" = { d = [] } }'),
])
def test_toml_value(value, expected):
    assert _toml_value(value) == expected


def test_toml_value_refuses_other_types():
    with pytest.raises(TypeError, match="no TOML form for object"):
        _toml_value(object())


def test_emit_toml_layout():
    data = {"a": 1, "t": {"x": "y", "u": {"v": 2}}, "e": {}, "only": {"sub": {"k": 3}}}
    assert _emit_toml(data) == REEMITTED_NOTE + (
        "a = 1\n"
        "\n"
        "[t]\n"
        'x = "y"\n'
        "\n"
        "[t.u]\n"
        "v = 2\n"
        "[e]\n"
        "[only.sub]\n"
        "k = 3\n"
    )


# -- YAML / JSON emitters ---------------------------------------------------------------------
def test_emit_yaml_keeps_order_unicode_and_block_style():
    docs = [{"b": {"c": [1, 2]}, "a": "é"}, {"z": 1}]
    assert _emit_yaml(docs) == REEMITTED_NOTE + "b:\n  c:\n  - 1\n  - 2\na: é\n---\nz: 1\n"


def test_emit_yaml_ascii_escapes_non_ascii():
    docs = [{"b": {"c": [1, 2]}, "a": "é\u2028"}]
    assert _emit_yaml_ascii(docs) == \
        REEMITTED_NOTE + 'b:\n  c:\n  - 1\n  - 2\na: "\\xE9\\L"\n'


def test_emit_json():
    assert _emit_json({"b": [1], "a": "é"}) == '{\n  "b": [\n    1\n  ],\n  "a": "é"\n}\n'


# -- _same / _leaks --------------------------------------------------------------------------
@pytest.mark.parametrize("a,b,expected", [
    (NAN, NAN, True), (NAN, 1.0, False), (1.0, NAN, False), (NAN, "nan", False),
    ({"a": 1}, {"a": 1}, True), ({"a": 1}, {"b": 1}, False), ({"a": 1}, {"a": 2}, False),
    ({"a": 1}, {"a": 1, "b": 2}, False), ({"a": [NAN]}, {"a": [NAN]}, True),
    ([1, 2], [1, 2], True), ([1], [1, 2], False), ([1, 2], [1], False), ([1, 2], [1, 3], False),
    ([1, 2], [2, 1], False), ([], [], True), ({}, [], False), ([], {}, False),
    (1, 1.0, False), (True, 1, False), (1, True, False), ("a", "a", True), ("a", "b", False),
    (None, None, True), ({"a": 1}, {"a": 1.0}, False),
])
def test_same(a, b, expected):
    assert _same(a, b) is expected


@pytest.mark.parametrize("text,secrets,expected", [
    ("x abcd y", {"abcd"}, True),
    ("x abcd y", {"zzzz", "abcd"}, True),
    ("x abc y", {"abc"}, False),  # under 4 characters: too common to look for
    ("REDACTED", {REDACTED}, False),
    ("x abcd y", set(), False),
    ("x y", {"abcd"}, False),
])
def test_leaks(text, secrets, expected):
    assert _leaks(text, secrets) is expected


# -- redact_document: which candidate wins -------------------------------------------------
def test_a_document_without_secrets_comes_back_as_it_was():
    text = "# c\na = nan\nb = [1, 2]\n"
    assert redact_document(text, "toml") is text


def test_line_redaction_wins_when_it_parses_to_the_redacted_structure():
    text = '# keep\npassword = "abc"\nuser = "u"\n'
    assert redact_document(text, "toml") == '# keep\npassword = "REDACTED"\nuser = "u"\n'


def test_a_secret_also_kept_elsewhere_falls_back_to_the_line_form():
    # the username equals the password: the output still holds "same" (as the username), and
    # no candidate avoids that, so the first that parses right is returned
    text = 'user = "same"\npassword = "same"\n'
    assert redact_document(text, "toml") == 'user = "same"\npassword = "REDACTED"\n'


def test_re_emission_when_the_line_form_leaves_a_secret():
    # a token inside a TOML key's value the line rules do not reach (a key without a hint)
    text = 'a = """\nx\n"""\n[t]\npassword = """p\nq"""\n'
    out = redact_document(text, "toml")
    assert out == 'a = """\nx\n"""\n[t]\npassword = "REDACTED"\n'


# -- bugs the mutation pass led to (fixed in agent/host/redact*.py) ------------------------------
@pytest.mark.parametrize("text,expected", [
    # An unterminated multi-line string: the one-line string rule matched its first two quotes
    # as an empty string, and the value after them was copied out.
    ('password = """hunter2\nmore\n', 'password = "REDACTED"\n'),
    ("password: '''hunter2\n", 'password: "REDACTED"\n'),
    # str.splitlines broke lines at \v (and \f, U+2028...): the value after it was a line of
    # its own, and a multi-line string holding one was copied out in part.
    ('password = \x0b"hunter2"\n', 'password = \x0b"REDACTED"\n'),
    ('password = """a\x0bhunter2"""\nx = 1\n', 'password = "REDACTED"\nx = 1\n'),
    ('password = """a\u2028hunter2"""\nx = 1\n', 'password = "REDACTED"\nx = 1\n'),
    ("a\x0cb\rc\x1c\n", "a\x0cb\rc\x1c\n"),  # nothing secret: the bytes are kept
])
def test_line_rules_do_not_leak_past_odd_line_breaks_or_open_strings(text, expected):
    assert redact_text(text) == expected


def test_an_unterminated_multi_line_toml_password_does_not_leak_through_collect():
    assert redact_document('password = """hunter2\nmore\n', "toml") == 'password = "REDACTED"\n'


def test_a_toml_key_ending_in_a_newline_is_quoted_and_re_emission_parses():
    # "$" matched before the final newline, so the key was written bare and broke the file
    assert _toml_key("a\n") == '"a\\n"'
    assert emit_toml({"a\n": {"b": 1}}) == '["a\\n"]\nb = 1\n'


# -- _b64_pem_sub boundaries: "PRIVATE KEY" looked for in the first 80 decoded bytes, blobs
# under 20 decoded bytes redacted whatever they hold, missing "=" padding restored.
def _b64(raw: str) -> str:
    return base64.b64encode(raw.encode()).decode()


@pytest.mark.parametrize("raw,kept", [
    ("-----BEGIN " + "X" * 58 + "PRIVATE KEY-----", False),  # ends at byte 80: seen
    ("-----BEGIN " + "X" * 59 + "PRIVATE KEY-----", True),  # ends at byte 81: past the look
    ("-----BEGIN " + "X" * 9, True),  # 20 bytes
    ("-----BEGIN " + "X" * 8, False),  # 19 bytes
])
def test_base64_pem_boundaries(raw, kept):
    blob = _b64(raw)
    assert blob.startswith("LS0tLS1CRUdJTi")
    assert redact_inline(f"d: {blob}") == (f"d: {blob}" if kept else "d: REDACTED")


@pytest.mark.parametrize("text", [
    B64_CERT.rstrip("="),  # unpadded: the padding is restored before decoding
    B64_CERT.rstrip("=")[:-3],  # one "=" short
    # 30 characters, 22 bytes decoded: two "=" short
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURQ",
    B64_CERT + "\\ y",  # a stray backslash is skipped, not an error
])
def test_base64_certificates_in_odd_shapes_are_kept(text):
    assert redact_inline(text) == text


def test_a_block_scalar_with_nothing_under_it_ends_at_the_next_line():
    assert redact_text("password: |\nother: x\n") == 'password: "REDACTED"\nother: x\n'


# -- the structural walk -------------------------------------------------------------------
def test_walk_replaces_leaves_under_a_secret_key_and_records_what_it_replaced():
    walker = _Walker(100)
    data = {"password": ["a", 1, 1.5, True, "", None, {"user": "u"}], "url": "https://u:p@h",
            "n": 7, "name": "x"}
    assert walker.walk(data, False) == {
        "password": ["REDACTED", 0, 0.0, True, "", None, {"user": "u"}],
        "url": "https://u:REDACTED@h", "n": 7, "name": "x"}
    assert walker.found == {"a", "https://u:p@h"}


def test_walk_budget_counts_every_value():
    assert redact_data({"a": [1]}, budget=3) == {"a": [1]}  # dict, list, 1
    with pytest.raises(TooLarge, match="^more than 200000 values$"):
        redact_data({"a": [1]}, budget=2)


def test_kind_for():
    assert [kind_for(p, t) for p, t in [
        ("C.TOML", "x"), ("a.YML", ""), ("a.yaml", ""), ("a.Json", "x"), ("a", "  [1]"),
        ("a", "\n{"), ("a", "x{"), ("a", ""), ("a.toml.bak", "k = 1"),
    ]] == ["toml", "yaml", "yaml", "json", "json", "json", "text", "text", "text"]


# a key only the parser can read as "password" (a TOML escape): the line rules cannot see it
ESCAPED_KEY = 'a = { "pass\\u0077ord" = "s3cr3t" }\n'


@pytest.mark.parametrize("argv,structural", [
    (["config", "dump"], True),
    (["containerd", "config", "dump"], True),
    (["containerd", "config", "default"], False),
    (["dump"], False),
    (["config", "dump", "x"], False),
])
def test_command_output_is_redacted_as_toml_only_for_config_dump(argv, structural):
    out = redact_command_output(argv, ESCAPED_KEY)
    assert out == (REEMITTED_NOTE + '[a]\npassword = "REDACTED"\n' if structural else ESCAPED_KEY)


def test_redact_data_of_a_top_level_string_or_list_applies_only_the_inline_rules():
    assert redact_data(["x", 1, "Bearer abcdefghijkl"]) == ["x", 1, "Bearer REDACTED"]
    assert redact_data("x") == "x"


def test_redact_file_picks_the_structural_rules_by_extension():
    assert redact_file("c.toml", ESCAPED_KEY) == REEMITTED_NOTE + '[a]\npassword = "REDACTED"\n'
    assert redact_file("c.txt", ESCAPED_KEY) == ESCAPED_KEY


@pytest.mark.parametrize("text,kind,expected", [
    ("a: 1\npassword: x\n", "yaml", "a: 1\npassword: REDACTED\n"),
    ("a: 1\n---\ntoken: x\n", "yaml", "a: 1\n---\ntoken: REDACTED\n"),
    ('{"password": "x", "n": 1}', "json", '{"password": "REDACTED", "n": 1}'),
    ('password = "x"\n[[', "toml", 'password = "REDACTED"\n[['),  # does not parse: line rules
    ("password: [x\n", "yaml", "password: REDACTED\n"),
    ('{"token": "x"', "json", '{"token": "REDACTED"'),
    ('password = "x"\n', "text", 'password = "REDACTED"\n'),
    ('password = "x"\n', "ini", 'password = "REDACTED"\n'),
    # YAML with an escaped key only the parser reads as "password": re-emitted
    ('"pass\\x77ord": x\nb: 1\n', "yaml", REEMITTED_NOTE + "password: REDACTED\nb: 1\n"),
    # JSON the same way: json.dumps, 2-space indent, no header (JSON has no comments)
    ('{"pass\\u0077ord": "x", "b": [1]}', "json",
     '{\n  "password": "REDACTED",\n  "b": [\n    1\n  ]\n}\n'),
])
def test_redact_document_by_kind(text, kind, expected):
    assert redact_document(text, kind) == expected



def test_a_top_level_list_is_not_under_a_secret_key():
    assert redact_document("- xyzw\n- y\n", "yaml") == "- xyzw\n- y\n"
    assert redact_document('["xyzw"]', "json") == '["xyzw"]'


def test_a_line_form_that_still_holds_the_secret_gives_way_to_re_emission():
    # the comment repeats the password: the line form parses right but leaks, the re-emission
    # (no comments) does not
    text = 'password = "hunter2"\n# was hunter2\n'
    assert redact_document(text, "toml") == REEMITTED_NOTE + 'password = "REDACTED"\n'


def test_a_private_key_file_as_text_is_replaced_once():
    text = f"{BEGIN}\nMIIE\n{END}\n"
    assert redact_text(text) == f"{BEGIN}\nREDACTED\n{END}\n"


def test_content_is_withheld_when_no_form_parses_back_to_the_redacted_structure(monkeypatch):
    # The line form writes `password = REDACTED` for the number, which does not parse; with the
    # one emitter failing too (as for a type it cannot write), nothing of the file is kept.
    def cannot_write(data):
        raise TypeError("no TOML form")

    monkeypatch.setitem(redact._FORMATS, "toml", (redact._parse_toml, (cannot_write,)))
    out = redact_document("a = 1\npassword = 123\n", "toml")
    assert out == "# redacted by gpu-node-agent collect: content withheld\n"
