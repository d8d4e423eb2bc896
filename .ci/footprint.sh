#!/usr/bin/env bash
# footprint.sh BEFORE AFTER: compares two `dpkg-query -W` snapshots taken before and after the
# test command. Fails when a package was removed or downgraded, or when one was added that is
# neither a package of .ci/installs.txt nor one of their dependencies (apt-cache depends
# --recurse, recommends and suggests excluded: the setup installs with --no-install-recommends).
# Prints what was added and upgraded, so the machine's change is on the record.
set -euo pipefail
before=$1 after=$2
cd "$(dirname "$0")/.."
# shellcheck disable=SC2046  # the package names, one per word
allowed=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances $(sed 's/#.*//' .ci/installs.txt) 2>/dev/null \
          | grep -v '^ ' | tr -d '<>' | sort -u)
declare -A old allow
while IFS=$'\t' read -r pkg version; do old[$pkg]=$version; done < "$before"
for pkg in $allowed; do allow[$pkg]=1; done
added=() upgraded=() bad=()
declare -A seen
while IFS=$'\t' read -r pkg version; do
  seen[$pkg]=1
  if [ -z "${old[$pkg]+x}" ]; then
    added+=("$pkg")
    [ -n "${allow[${pkg%%:*}]+x}" ] || bad+=("added, not in .ci/installs.txt or their dependencies: $pkg $version")
  elif [ "${old[$pkg]}" != "$version" ]; then
    if dpkg --compare-versions "$version" gt "${old[$pkg]}"; then
      upgraded+=("$pkg ${old[$pkg]} -> $version")
    else
      bad+=("downgraded: $pkg ${old[$pkg]} -> $version")
    fi
  fi
done < "$after"
for pkg in "${!old[@]}"; do
  [ -n "${seen[$pkg]+x}" ] || bad+=("removed: $pkg ${old[$pkg]}")
done
echo "== footprint: ${#added[@]} packages added, ${#upgraded[@]} upgraded, $(( ${#bad[@]} )) refused"
[ "${#added[@]}" -eq 0 ] || printf '%s\n' "${added[@]}" | sort | paste -sd' ' | fold -s -w 100 | sed 's/^/  added: /'
[ "${#upgraded[@]}" -eq 0 ] || printf '  upgraded: %s\n' "${upgraded[@]}"
if [ "${#bad[@]}" -gt 0 ]; then
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
