#!/usr/bin/env bash
# Install Nsight Systems into a folder of the project (default: .nsys/) without touching the system:
# Debian's non-free packages nsight-systems-target + nsight-systems (from `experimental`: 2024.2.3, the newest
# Debian has; it records CUDA 13 programs completely where 2023.4 loses most events, docs/nsys-versions.md) are
# downloaded with a private apt state and unpacked with dpkg -x. The mirror is taken from this machine's own apt
# sources. If that suite has no Nsight Systems, trixie's 2023.4.4 is taken instead, with a warning.
# Result: $DEST/target-linux-x64/nsys (CLI) beside $DEST/host-linux-x64/QdstrmImporter (import/export).
# usage: install_nsys.sh [DEST] [SUITE] [VERSION]
#   SUITE: the Debian suite to take Nsight Systems from (default experimental: 2024.2.3, CUDA <= 12.5, which on a
#   CUDA 13 driver falls back to its 12.5 libraries and records completely; trixie: 2023.4.4, CUDA <= 12.4).
#   VERSION pins a package version (apt's pkg=VERSION). Into another DEST, then NSYS=DEST/target-linux-x64/nsys
#   selects it.
set -euo pipefail
dest=$(realpath -m "${1:-.nsys}")
suite=${2:-${NSYS_SUITE:-experimental}}
version=${3:-${NSYS_VERSION:-}}
case "$suite" in *[!a-z0-9-]*|"") echo "install-nsys: bad suite '$suite'" >&2; exit 2;; esac
case "$version" in *[!A-Za-z0-9.~+:-]*) echo "install-nsys: bad version '$version'" >&2; exit 2;; esac
say() { echo "install-nsys: $*" >&2; }
if [ -x "$dest/target-linux-x64/nsys" ] && [ -x "$dest/host-linux-x64/QdstrmImporter" ]; then
  say "already installed: $dest/target-linux-x64/nsys"; exit 0; fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
  say "needs apt-get and dpkg (Debian/Ubuntu). Elsewhere install Nsight Systems from NVIDIA and set NSYS=/path/to/nsys"; exit 2; }
# The mirror: the first Debian URI in this machine's apt sources (deb822 or one-line format).
mirror=$(grep -rhoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' \
  /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | grep -oE '[a-z]+://[^[:space:]]+' | head -n1 || true)
[ -n "$mirror" ] || { say "no Debian mirror in /etc/apt/sources*; install Nsight Systems from NVIDIA and set NSYS=/path/to/nsys"; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
codename=$(. /etc/os-release 2>/dev/null; echo "${VERSION_CODENAME:-bookworm}")
# libssh-4 (needed by QdstrmImporter) comes from this system's own release, nsys from trixie non-free
printf 'deb [trusted=yes] %s %s non-free\ndeb [trusted=yes] %s %s main\n' "$mirror" "$suite" "$mirror" "$codename" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives" -o "APT::Architecture=amd64"
  -o "Acquire::AllowInsecureRepositories=true" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
say "fetching package lists from $mirror ($suite non-free)"
apt-get -qq "${apt_opts[@]}" update >/dev/null
pin=${version:+=$version}
say "downloading nsight-systems-target$pin and nsight-systems$pin (~190 MB)"
if ! (cd "$work/debs" && apt-get -qq "${apt_opts[@]}" download "nsight-systems-target$pin" "nsight-systems$pin" >/dev/null); then
  [ "$suite" != trixie ] || { say "no Nsight Systems in $suite non-free"; exit 2; }
  say "warning: no Nsight Systems$pin in $suite; taking trixie's 2023.4.4 (it loses CUDA events on CUDA 13 drivers)"
  printf 'deb [trusted=yes] %s trixie non-free\ndeb [trusted=yes] %s %s main\n' "$mirror" "$mirror" "$codename" > "$work/sources.list"
  apt-get -qq "${apt_opts[@]}" update >/dev/null
  (cd "$work/debs" && apt-get -qq "${apt_opts[@]}" download nsight-systems-target nsight-systems >/dev/null)
fi
# 2024.2's QdstrmImporter links libarrow.so.500 and libparquet.so.500, which its package does not ship
(cd "$work/debs" && apt-get -qq "${apt_opts[@]}" download libarrow500 libparquet500 >/dev/null 2>&1) || true
ldconfig -p | grep -q 'libssh.so.4 ' || (cd "$work/debs" && apt-get -qq "${apt_opts[@]}" download libssh-4 >/dev/null) || true
say "unpacking into $dest"
for d in "$work"/debs/*.deb; do dpkg -x "$d" "$work/root"; done
# the packages put target-linux-x64 and host-linux-x64 in different folders: find each
# -print -quit, not | head: with pipefail, find killed by SIGPIPE once head has its line fails the script (exit 141)
target=$(find "$work/root" -type d -name target-linux-x64 -print -quit)
host=$(find "$work/root" -type d -name host-linux-x64 -print -quit)
[ -n "$target" ] && [ -n "$host" ] || { say "the packages did not hold target-linux-x64 and host-linux-x64"; exit 2; }
mkdir -p "$dest"
cp -a "$target" "$host" "$dest/"
# nsys stats needs the python helpers that the package installs in dist-packages
py="$dest/host-linux-x64/python/lib"; mkdir -p "$py"
find "$work/root/usr/lib/python3" -name '*.py' -exec cp {} "$py/" \; 2>/dev/null || true
for lib in libarrow.so.500 libparquet.so.500; do
  f=$(find "$work/root" -name "$lib*" -type f -print -quit)
  [ -n "$f" ] && cp -L "$f" "$dest/host-linux-x64/$lib"
done
# QdstrmImporter links libssh.so: give it the system's libssh.so.4, or the one unpacked above
if ! ldconfig -p | grep -q 'libssh.so '; then
  s=$(ldconfig -p | awk '$1=="libssh.so.4" && !s {s=$NF} END {print s}')
  [ -n "$s" ] || s=$(find "$work/root" -name 'libssh.so.4*' -type f -print -quit)
  if [ -n "$s" ]; then rm -f "$dest/host-linux-x64/libssh.so"; cp -L "$s" "$dest/host-linux-x64/libssh.so"
  else say "warning: libssh.so.4 not found (apt-get install libssh-4); import of .qdstrm will fail"; fi
fi
# `nsys recipe` (its Python package in target-linux-x64/python/packages/nsys_recipe) looks for a bundled third_party
# folder and libsqlite3.so.0 beside nsys, which the distribution's package leaves out: an empty folder and the
# system's SQLite do (its Python needs: nsys_recipe/requirements/common.txt and dask.txt, in the interpreter on PATH)
recipe="$dest/target-linux-x64/python/packages/nsys_recipe"
[ -d "$recipe" ] && mkdir -p "$recipe/third_party"
q=$(ldconfig -p | awk '$1=="libsqlite3.so.0" && !q {q=$NF} END {print q}')  # reads it all: no SIGPIPE
[ -n "$q" ] && [ ! -e "$dest/target-linux-x64/libsqlite3.so.0" ] && ln -s "$q" "$dest/target-linux-x64/libsqlite3.so.0"
"$dest/target-linux-x64/nsys" --version >&2
say "installed: $dest/target-linux-x64/nsys"
