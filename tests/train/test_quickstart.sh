#!/usr/bin/env bash
# e2e_quickstart: the README's first command, scripts/quickstart.sh, from its corpus
# step on, with this build's programs (LLMTRAIN_SKIP_DEPS/SKIP_BUILD: CI's test.sh
# has just installed and built them) and 100 iterations instead of 300. It must end
# with its summary, the val loss at least 0.5 nats/byte below the corpus's
# byte-unigram entropy (quickstart.sh exits 1 otherwise), and name the report page
# it wrote. Also: every script the
# project's scripts, sbatch templates and README run by path is executable in git
# (python-env.sh was not, and the quick start died at its corpus step).
# Usage: test_quickstart.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$build/test-work/e2e_quickstart
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

cd "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # scripts/x.sh, jobs/x.sbatch, python/x.py run as commands (not after bash/python/source).
  mapfile -t ran < <(grep -hvE '^\s*#' scripts/*.sh jobs/*.sbatch README.md |
      grep -oE '(bash |python3? |source |\. )?"?(\$root/|\$src/|\./)?(scripts|jobs|benchmarks)/[A-Za-z0-9_.-]+\.(sh|py)' |
      grep -vE '^(bash|python3?|source|\.) ' | grep -oE '(scripts|jobs|benchmarks)/[A-Za-z0-9_.-]+\.(sh|py)$' | sort -u)
  for f in "${ran[@]}"; do
    [[ -f "$f" ]] || continue
    mode=$(git ls-files -s -- "$f" | cut -d' ' -f1)
    [[ -z "$mode" || "$mode" == 100755 ]] || fail "$f is run by path but its mode in git is $mode (git update-index --chmod=+x $f)"
  done
  echo "checked the git mode of ${#ran[@]} scripts run by path"
fi

out=$(LLMTRAIN_SKIP_DEPS=1 LLMTRAIN_SKIP_BUILD=1 BUILD_DIR="$build" DATA_DIR="$work/data" OUT_DIR="$work/out" \
  EXTRA_ARGS="--max_iters=100 --lr_decay_iters=100 --warmup_iters=10 --eval_interval=100 --eval_iters=5 --log_interval=50" \
  bash scripts/quickstart.sh 2>&1) || { echo "$out" | tail -n 40; fail "scripts/quickstart.sh exited non-zero"; }
echo "$out" | tail -n 12
grep -q "^val loss below entropy .*(yes)" <<<"$out" || fail "no summary line saying the model learned"
[[ -f "$work/data/index.json" ]] || fail "no data directory at $work/data"
compgen -G "$work/out/run_*.json" >/dev/null || fail "no run log in $work/out"
grep -q "^report page .*$work/out/report.html" <<<"$out" || fail "the quick start does not name its report page"
grep -q "<figure id=\"fig-phases-0\"" "$work/out/report.html" || fail "no report page at $work/out/report.html"
echo "quickstart: corpus, prepare, 2-rank training and the summary work"
