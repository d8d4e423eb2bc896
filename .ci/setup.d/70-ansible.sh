#!/usr/bin/env bash
# ansible-core, ansible-lint and pytest-testinfra (PyPI) for the Ansible role's tests
# (tests/integration/test_ansible_role.py), in their own venv in the cache so their pins never
# meet the project's test venvs: GNA_ANSIBLE_VENV, default $GNA_CI_CACHE/ansible
# (tests/components.py reads the same variables). ansible-core is left unpinned: pip picks the
# newest release whose Requires-Python admits the controller's interpreter (the newest Python
# installed here). The NodeConfig test also uses `containerd config dump` as its oracle:
# 30-containerd.sh unpacks containerd.
set -euo pipefail
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/../lib.sh"
venv=${GNA_ANSIBLE_VENV:-$GNA_CI_CACHE/ansible}

newest_python() {  # the newest pyenv CPython 3.x, else python3 on PATH
  local candidate
  candidate=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$candidate" ]; then echo "$candidate"; else command -v python3; fi
}

if ! { [ -x "$venv/bin/ansible-playbook" ] && [ -x "$venv/bin/ansible-lint" ] \
       && "$venv/bin/python" -c 'import testinfra' 2>/dev/null; }; then
  mkdir -p "$(dirname "$venv")"
  "$(newest_python)" -m venv --clear "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q ansible-core ansible-lint pytest-testinfra
fi
"$venv/bin/ansible-playbook" --version | sed -n 1p  # sed reads it all: head could close the pipe first (EPIPE under pipefail)
