#!/usr/bin/env bash
# get-specs.sh: fetch the unified-format spec test files the conformance runner replays.
#   tests/conformance/get-specs.sh DIR [SOURCE]
# Fetches the pinned commit (COMMIT below) of mongodb/specifications (SOURCE: a URL or
# a local clone; default https://github.com/mongodb/specifications.git), copies the .json
# test files of each area below into DIR/unified/<area>/ (the layout run.sh and skip.txt use), copies the
# licence to DIR/LICENSE.md and writes DIR/SOURCE.txt. Then run the tests with
#   CONFORMANCE_ROOT=DIR/unified ctest -R conformance --output-on-failure    (in build/)
# or, with DIR = ../shared/conformance (next to the checkout), without CONFORMANCE_ROOT.
# The files are licensed CC BY-NC-SA 3.0 US: never commit them to this repository.
# Needs git and tar; refuses to overwrite an existing DIR/unified.
set -euo pipefail
COMMIT=92b3c0b9287bfba1b0ec4084300858d05c654f8c   # keep in step with run.sh and skip.txt
# <directory under DIR/unified> <directory in mongodb/specifications>
AREAS='
crud                                      source/crud/tests/unified
collection-management                     source/collection-management/tests
index-management                          source/index-management/tests
command-logging-and-monitoring/monitoring source/command-logging-and-monitoring/tests/monitoring
command-logging-and-monitoring/logging    source/command-logging-and-monitoring/tests/logging
sessions                                  source/sessions/tests
retryable-writes                          source/retryable-writes/tests/unified
retryable-reads                           source/retryable-reads/tests/unified
transactions                              source/transactions/tests/unified
change-streams                            source/change-streams/tests/unified
run-command                               source/run-command/tests/unified
transactions-convenient-api               source/transactions-convenient-api/tests/unified
server-discovery-and-monitoring           source/server-discovery-and-monitoring/tests/unified
'
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dest=$1
src=${2:-https://github.com/mongodb/specifications.git}
if [ -e "$dest/unified" ]; then
  echo "get-specs.sh: $dest/unified already exists; remove it first to fetch again" >&2
  exit 1
fi
mkdir -p "$dest"
tmp=$(mktemp -d)
stage="$dest/unified.partial.$$"   # renamed to DIR/unified only when complete
trap 'rm -rf "$tmp" "$stage"' EXIT
git init -q "$tmp/repo"
# A shallow fetch of the one commit (GitHub allows it); else the whole history.
if ! git -C "$tmp/repo" fetch -q --depth 1 "$src" "$COMMIT" 2>/dev/null; then
  git -C "$tmp/repo" fetch -q "$src" '+refs/heads/*:refs/remotes/origin/*'
fi
git -C "$tmp/repo" cat-file -e "$COMMIT^{commit}"
paths=$(echo "$AREAS" | awk 'NF { print $2 }')
mkdir "$tmp/x"
# shellcheck disable=SC2086
git -C "$tmp/repo" archive --format=tar "$COMMIT" LICENSE.md $paths | tar -x -C "$tmp/x"
summary=
while read -r area upstream; do
  [ -n "$area" ] || continue
  mkdir -p "$stage/$area"
  cp "$tmp/x/$upstream"/*.json "$stage/$area/"
  n=$(find "$stage/$area" -maxdepth 1 -name '*.json' | wc -l)
  summary+=$(printf '  unified/%-42s <- %s (%d files)' "$area" "$upstream" "$n")$'\n'
done <<<"$AREAS"
cp "$tmp/x/LICENSE.md" "$dest/LICENSE.md"
{
  echo "Source repository: https://github.com/mongodb/specifications (fetched from $src)"
  echo "Commit: $COMMIT"
  echo "License: CC BY-NC-SA 3.0 US (LICENSE.md). Written by Sable's tests/conformance/get-specs.sh."
  echo "Areas (the upstream .json files, unchanged):"
  printf '%s' "$summary"
} >"$dest/SOURCE.txt"
mv "$stage" "$dest/unified"
printf '%s' "$summary"
echo "get-specs.sh: done; CONFORMANCE_ROOT=$(cd "$dest/unified" && pwd)"
