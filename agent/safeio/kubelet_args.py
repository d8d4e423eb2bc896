"""The kubelet's flags as its args and environment files hold them: the words (shlex's POSIX
rules in linear time), a flag's values, and the ``--node-labels`` map. Hostile input: nodeadm's
rendered environment file, kubeadm's flags file and the snap's args file are read by
registration-labels, containerd-cgroup-driver and the Node-name lookup (agent/safeio/nodeadm.py
re-exports these names).
"""
import re
from typing import List, Sequence, Tuple

_ENV_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PLAIN = re.compile(r"[^ \t\r\n#'\"\\]+")
_IN_DOUBLE = re.compile(r'["\\]')


def _split(line: str) -> List[str]:
    """``shlex.split(line, comments=True)`` (POSIX mode) in linear time: shlex grows each token
    one character at a time (``self.token += nextchar``), quadratic in a token's length, and a
    1.1 MB quoted NODEADM_KUBELET_ARGS value took 38 s. Same rules: blanks are space, tab, CR,
    LF; ``#`` outside quotes ends the line; '...' is literal; in "..." a backslash escapes only
    ``"`` and ``\\``; outside quotes it escapes any character. Raises ValueError as shlex does
    (an unclosed quote, a trailing backslash)."""
    words: List[str] = []
    cur: List[str] = []
    have = False
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c in " \t\r\n":
            if have:
                words.append("".join(cur))
                cur, have = [], False
            i += 1
            continue
        if c == "#":  # a comment runs to the end of the line (shlex: readline())
            if cur:  # a word before it (even '') is kept
                words.append("".join(cur))
                cur, have = [], False
            j = line.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        have = True
        if c == "'":
            j = line.find("'", i + 1)
            if j < 0:
                raise ValueError("No closing quotation")
            cur.append(line[i + 1:j])
            i = j + 1
        elif c == '"':
            i += 1
            while True:
                m = _IN_DOUBLE.search(line, i)
                if m is None:
                    raise ValueError("No closing quotation")
                j = m.start()
                cur.append(line[i:j])
                if line[j] == '"':
                    i = j + 1
                    break
                if j + 1 >= n:
                    raise ValueError("No escaped character")
                nxt = line[j + 1]
                cur.append(nxt if nxt in '"\\' else "\\" + nxt)
                i = j + 2
        elif c == "\\":
            if i + 1 >= n:
                raise ValueError("No escaped character")
            cur.append(line[i + 1])
            i += 2
        else:
            m = _PLAIN.match(line, i)
            assert m is not None  # c is none of the characters _PLAIN excludes
            cur.append(m.group())
            i = m.end()
    if have:
        words.append("".join(cur))
    return words


def args_words(text: str) -> List[str]:
    """The kubelet arguments an args/environment file holds, as the kubelet receives them:
    ``KEY="--a --b"`` (systemd's EnvironmentFile, expanded unquoted as ``$KEY`` in ExecStart,
    so split at whitespace) and one flag a line (the snap's args file) alike."""
    words: List[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parts = _split(line)
        except ValueError:
            parts = line.split()
        for part in parts:
            m = _ENV_ASSIGN.match(part)
            words.extend(part[m.end():].split() if m else [part])
    return words


def flag_values(words: Sequence[str], flag: str) -> List[str]:
    """Every value of ``--flag`` in ``words`` (``--flag=v`` and ``--flag v``), in order."""
    out = []
    name = f"--{flag}"
    for i, word in enumerate(words):
        if word.startswith(name + "="):
            out.append(word[len(name) + 1:])
        elif word == name and i + 1 < len(words):
            out.append(words[i + 1])
    return out


def node_labels(words: Sequence[str]) -> List[Tuple[str, str]]:
    """(key, value) of every ``--node-labels`` entry: k8s.io/component-base cli/flag
    MapStringString (comma-separated ``key=value``, both trimmed; every instance of the flag
    adds to the map)."""
    out = []
    for value in flag_values(words, "node-labels"):
        for item in value.split(","):
            key, sep, val = item.partition("=")
            if sep and key.strip():
                out.append((key.strip(), val.strip()))
    return out
