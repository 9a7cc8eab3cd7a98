# shellcheck shell=bash
# jobs/common.sh — settings and helpers shared by every llmtrain sbatch template.
# Sourced (not run) by jobs/*.sbatch, inside the allocation, in bash.
#
# Everything a user varies is an environment variable with a default. sbatch
# exports the submitting shell's environment by default, so
#     MODEL=inputs/llama2_7b.cfg ITERS=200 sbatch jobs/tier2.sbatch
# works; the node/GPU counts are sbatch's own options (--nodes, --gpus-per-node,
# --ntasks-per-node), which jobs/submit.sh fills from NODES / GPUS_PER_NODE.
#
#   MODEL          preset config file (first positional argument of llmtrain); empty = none
#   ITERS          optimizer steps (--max_iters)                         [template default]
#   DATA_DIR       token shards from llmtrain-prepare (--data_dir)       [$LLMTRAIN_ROOT/data/sotu_byte]
#   OUT_ROOT       where run directories go                              [$SLURM_SUBMIT_DIR/out]
#   OUT_DIR        exact run directory (overrides OUT_ROOT/<job>_<id>)
#   EXTRA_ARGS     more llmtrain flags, applied last (they win): "--block_size=2048 --seed=7"
#   VARIANTS       which variants a multi-run template runs (see each template)
#   LLMTRAIN_ROOT  source tree or install prefix share/llmtrain   [parent of this jobs/ dir]
#   LLMTRAIN_BIN   directory holding llmtrain, llmtrain-prepare, llmtrain-report
#                  [$LLMTRAIN_ROOT/build/bin if it exists, else from PATH]
#   LLMTRAIN_ENV   how to get the software: none | spack | modules          [none]
#   LLMTRAIN_SPACK_ENV  Spack environment dir or name (LLMTRAIN_ENV=spack)  [$LLMTRAIN_ROOT]
#   LLMTRAIN_MODULES    modules to load (LLMTRAIN_ENV=modules), e.g. "gcc/12 openmpi/4.1 cuda/12.4 llmtrain"
#   LLMTRAIN_LAUNCHER   srun | mpirun                                        [srun]
#   LLMTRAIN_SRUN_MPI   srun --mpi plugin: pmix (pmi2 fails with Debian's Open MPI) [pmix]
#   LLMTRAIN_MPIRUN_GRACE_S  mpirun: seconds between a SIGTERM reaching mpirun and the ranks being
#                       told, and as long again until they are killed (Open MPI's
#                       odls_base_sigkill_timeout, default 1 s: too short for a checkpoint;
#                       Open MPI 4.1 only: 5's has no such setting, see below) [30]
#   THREADS_PER_RANK    intra-op CPU threads per rank  [$SLURM_CPUS_PER_TASK, else llmtrain decides]
#   NCCL_*              passed through; defaults below only where unset
#
# Pre-emption contract (templates ask for `#SBATCH --signal=B:USR1@120 --requeue`):
# Slurm sends SIGUSR1 to this batch shell 120 s before the time limit (or when
# the job is pre-empted with a grace time); llmtrain_run forwards it to the
# launcher, which forwards it to every rank. llmtrain then finishes the current
# iteration, writes a checkpoint and exits with LLMTRAIN_REQUEUE_EXIT_CODE
# (124, "stopped early, resumable"). On that code the template requeues the job
# (`scontrol requeue`); the requeued job sees SLURM_RESTART_COUNT > 0, skips the
# variants it already finished (marker file .done) and passes --init_from=resume
# for the interrupted one. Any other non-zero code is a failure and is not
# requeued, except in a multi-node job where a node no longer answers (a node
# lost mid-run): that job is requeued too and resumes the same way on the
# nodes that remain (llmtrain_lost_nodes).

# ---- where things are -------------------------------------------------------
_llmtrain_common_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${LLMTRAIN_ROOT:=$(cd "$_llmtrain_common_dir/.." && pwd)}"
export LLMTRAIN_ROOT
LLMTRAIN_JOBS_DIR=$_llmtrain_common_dir
export LLMTRAIN_JOBS_DIR
: "${LLMTRAIN_REQUEUE_EXIT_CODE:=124}"

llmtrain_log() { printf '[%s llmtrain-job] %s\n' "$(date +%H:%M:%S)" "$*"; }
llmtrain_die() { printf '[%s llmtrain-job] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

# ---- software environment ---------------------------------------------------
: "${LLMTRAIN_ENV:=none}"
case "$LLMTRAIN_ENV" in
  none) ;;
  spack)
    if ! command -v spack >/dev/null 2>&1; then
      [[ -n "${SPACK_ROOT:-}" && -f "$SPACK_ROOT/share/spack/setup-env.sh" ]] ||
        llmtrain_die "LLMTRAIN_ENV=spack but 'spack' is not on PATH and SPACK_ROOT is not set"
      # shellcheck disable=SC1091
      source "$SPACK_ROOT/share/spack/setup-env.sh"
    fi
    spack env activate "${LLMTRAIN_SPACK_ENV:-$LLMTRAIN_ROOT}" ||
      llmtrain_die "spack env activate '${LLMTRAIN_SPACK_ENV:-$LLMTRAIN_ROOT}' failed"
    ;;
  modules)
    command -v module >/dev/null 2>&1 || type module >/dev/null 2>&1 ||
      llmtrain_die "LLMTRAIN_ENV=modules but the 'module' command is not available in this shell"
    [[ -n "${LLMTRAIN_MODULES:-}" ]] || llmtrain_die "LLMTRAIN_ENV=modules needs LLMTRAIN_MODULES (e.g. 'openmpi cuda llmtrain')"
    # shellcheck disable=SC2086
    module load $LLMTRAIN_MODULES || llmtrain_die "module load $LLMTRAIN_MODULES failed"
    ;;
  *) llmtrain_die "LLMTRAIN_ENV='$LLMTRAIN_ENV': expected none, spack or modules" ;;
esac

if [[ -z "${LLMTRAIN_BIN:-}" ]]; then
  if [[ -x "$LLMTRAIN_ROOT/build/bin/llmtrain" ]]; then
    LLMTRAIN_BIN=$LLMTRAIN_ROOT/build/bin
  elif command -v llmtrain >/dev/null 2>&1; then
    LLMTRAIN_BIN=$(dirname "$(command -v llmtrain)")
  else
    llmtrain_die "llmtrain not found: set LLMTRAIN_BIN to the directory holding it, build it into $LLMTRAIN_ROOT/build/bin, or put it on PATH (LLMTRAIN_ENV=spack|modules)"
  fi
fi
export LLMTRAIN_BIN

# ---- what the user varies ---------------------------------------------------
: "${SLURM_SUBMIT_DIR:=$PWD}"
: "${DATA_DIR:=$LLMTRAIN_ROOT/data/sotu_byte}"
: "${OUT_ROOT:=$SLURM_SUBMIT_DIR/out}"
: "${EXTRA_ARGS:=}"
JOB_NAME=${SLURM_JOB_NAME:-$(basename "${0%.sbatch}")}
JOB_ID=${SLURM_JOB_ID:-local$$}
: "${OUT_DIR:=$OUT_ROOT/${JOB_NAME}_${JOB_ID}}"
NTASKS=${SLURM_NTASKS:-${NTASKS:-1}}
NNODES=${SLURM_JOB_NUM_NODES:-1}

# ---- threads, NCCL, MPI -----------------------------------------------------
: "${THREADS_PER_RANK:=${SLURM_CPUS_PER_TASK:-}}"
if [[ -n "$THREADS_PER_RANK" ]]; then
  export OMP_NUM_THREADS=$THREADS_PER_RANK
  export MKL_NUM_THREADS=$THREADS_PER_RANK OPENBLAS_NUM_THREADS=$THREADS_PER_RANK
fi
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# One connection per device keeps kernel order = launch order, so compute and
# NCCL kernels overlap as issued (what Megatron/torchrun recipes set too).
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
[[ -n "${NCCL_IFNAME:-}" ]] && export NCCL_SOCKET_IFNAME=$NCCL_IFNAME
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

: "${LLMTRAIN_LAUNCHER:=srun}"
: "${LLMTRAIN_SRUN_MPI:=pmix}"
# llmtrain_launcher: sets the array LAUNCHER to the command that starts one
# task per GPU (per slot on CPU). Every rank picks its device from its
# node-local rank, so nothing here sets CUDA_VISIBLE_DEVICES.
llmtrain_launcher() {
  case "$LLMTRAIN_LAUNCHER" in
    srun)
      [[ -n "${SLURM_JOB_ID:-}" ]] || llmtrain_die "LLMTRAIN_LAUNCHER=srun needs a Slurm allocation; use LLMTRAIN_LAUNCHER=mpirun outside Slurm"
      # Since Slurm 22.05 srun does not inherit --cpus-per-task from sbatch.
      LAUNCHER=(srun --mpi="$LLMTRAIN_SRUN_MPI" --kill-on-bad-exit=1
                ${SLURM_CPUS_PER_TASK:+--cpus-per-task=$SLURM_CPUS_PER_TASK}) ;;
    mpirun)
      # A SIGTERM that reaches mpirun itself (Slurm at the time limit signals
      # every process of the job) makes Open MPI 4.1 send the ranks SIGCONT at
      # once, SIGTERM odls_base_sigkill_timeout seconds later and SIGKILL as long
      # again later (default 1 s: measured SIGTERM at +1.06 s, killed at +2.1 s);
      # the ranks, signalled by Slurm directly, need that long to finish the
      # iteration and write the checkpoint (docs/guide.md, pre-emption).
      export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-${LLMTRAIN_MPIRUN_GRACE_S:-30}}
      # Open MPI 5's mpirun (PRRTE's prterun) has no such grace: on SIGTERM it
      # sends the ranks SIGCONT, SIGTERM 0.25 s later and SIGKILL 0.25 s after
      # that (fixed in PRRTE's odls; SIGTERM is not among the signals it may
      # forward), so no iteration ends and no checkpoint is written. mpirun is
      # therefore started with SIGTERM *blocked*: its handler never runs, the
      # ranks (launched with every signal unblocked, by 4.1 and 5 alike) take
      # Slurm's SIGTERM themselves, and the job shell passes its own signal on
      # as SIGUSR1, which both versions forward. `env --block-signal` is GNU
      # coreutils >= 8.31; perl (Debian's perl-base, every RHEL) otherwise.
      LLMTRAIN_MPIRUN_SHIELD=()
      if env --block-signal=TERM true 2>/dev/null; then
        LLMTRAIN_MPIRUN_SHIELD=(env --block-signal=TERM)
      elif command -v perl >/dev/null; then
        # shellcheck disable=SC2016  # perl's variables, not the shell's
        LLMTRAIN_MPIRUN_SHIELD=(perl -MPOSIX -e 'sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGTERM)) or die "sigprocmask: $!\n"; exec {$ARGV[0]} @ARGV or die "exec $ARGV[0]: $!\n"')
      else
        llmtrain_log "warning: neither 'env --block-signal' nor perl: a SIGTERM that reaches mpirun itself ends the job without a checkpoint under Open MPI 5"
      fi
      LAUNCHER=("${LLMTRAIN_MPIRUN_SHIELD[@]}" mpirun -np "$NTASKS" --bind-to none) ;;
    *) llmtrain_die "LLMTRAIN_LAUNCHER='$LLMTRAIN_LAUNCHER': expected srun or mpirun" ;;
  esac
}
llmtrain_launcher

# ---- running llmtrain -------------------------------------------------------
_llmtrain_child=""
_llmtrain_forward() {
  llmtrain_log "received $1: asking llmtrain to checkpoint and stop (exit code $LLMTRAIN_REQUEUE_EXIT_CODE = requeue)"
  local sig=$1
  # mpirun passes SIGUSR1 on to every rank and then exits with the ranks' code
  # (124); a SIGTERM it does not pass on: it ends the job itself (SIGTERM, then
  # SIGKILL, odls_base_sigkill_timeout apart) and exits 1 whatever the ranks
  # return. Both mean "checkpoint and stop" to llmtrain, so mpirun gets USR1.
  [[ "$LLMTRAIN_LAUNCHER" == mpirun ]] && sig=USR1
  _llmtrain_stop_asked=1
  [[ -n "$_llmtrain_child" ]] && kill -"$sig" "$_llmtrain_child" 2>/dev/null
  return 0
}
_llmtrain_stop_asked=0
trap '_llmtrain_forward USR1' USR1
trap '_llmtrain_forward TERM' TERM

# llmtrain_exec LOGFILE CMD ARGS... : runs CMD through the launcher in the
# background (so signals reach this shell and get forwarded), copies its output
# to LOGFILE and to the job's output, returns its exit status.
llmtrain_exec() {
  local logfile=$1; shift
  llmtrain_log "run: ${LAUNCHER[*]} $*"
  # The launcher itself is the background child (not a subshell around it), so
  # the forwarded signal reaches srun/mpirun, which pass it on to every rank.
  local log_start=0
  [[ -f "$logfile" ]] && log_start=$(stat -c %s "$logfile")
  _llmtrain_stop_asked=0
  "${LAUNCHER[@]}" "$@" >>"$logfile" 2>&1 &
  _llmtrain_child=$!
  tail -n +1 -F --pid="$_llmtrain_child" "$logfile" 2>/dev/null &
  local tailpid=$! rc
  while :; do
    wait "$_llmtrain_child"; rc=$?
    # A trapped signal interrupts `wait` with 128+n while the child lives on.
    if ((rc > 128)) && kill -0 "$_llmtrain_child" 2>/dev/null; then continue; fi
    break
  done
  wait "$tailpid" 2>/dev/null
  _llmtrain_child=""
  # Slurm's SIGTERM at the time limit reaches every process of the job, mpirun
  # too; where mpirun could not be started with SIGTERM blocked (above), Open
  # MPI 4.1 then ends the job itself and exits 1 whatever the ranks return,
  # although they (signalled directly) finished the iteration, wrote the
  # checkpoint and left with the requeue code. Their own word decides: rank 0's
  # "stopped by signal ... checkpoint" line in this run's part of the log.
  if ((rc != 0 && rc != LLMTRAIN_REQUEUE_EXIT_CODE && _llmtrain_stop_asked)) &&
     [[ "$LLMTRAIN_LAUNCHER" == mpirun ]] &&
     tail -c +$((log_start + 1)) "$logfile" 2>/dev/null | grep -q 'stopped by signal [0-9]* after iteration .*; checkpoint '; then
    llmtrain_log "mpirun exited $rc after the ranks stopped with a checkpoint (mpirun ends the job itself on SIGTERM): exit code $LLMTRAIN_REQUEUE_EXIT_CODE"
    rc=$LLMTRAIN_REQUEUE_EXIT_CODE
  fi
  return "$rc"
}

# llmtrain_lost_nodes: sets LOST_NODES to the nodes of this allocation whose
# slurmd does not start a task (comma-separated; empty when all answer) by
# running one probe task per node (srun --overlap, bounded by
# LLMTRAIN_NODE_PROBE_S seconds, default 60). Returns 1, LOST_NODES empty, when
# the probe tells nothing: no task started anywhere, not even on this batch
# node, which is alive (the job is being ended, e.g. Slurm's own NODE_FAIL
# handling, which requeues it by itself).
llmtrain_lost_nodes() {
  LOST_NODES=""
  local all answered n
  all=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null) || return 1
  [[ -n "$all" ]] || return 1
  answered=$(timeout "${LLMTRAIN_NODE_PROBE_S:-60}" srun --overlap --nodes="$NNODES" --ntasks-per-node=1 \
               --kill-on-bad-exit=0 printenv SLURMD_NODENAME 2>/dev/null)
  [[ -n "$answered" ]] || return 1
  for n in $all; do
    [[ "$n" == "${SLURMD_NODENAME:-}" ]] && continue
    grep -qx "$n" <<<"$answered" || LOST_NODES+=${LOST_NODES:+,}$n
  done
  return 0
}

# llmtrain_run VARIANT [llmtrain flags...]
# Runs one llmtrain training run into $OUT_DIR/VARIANT ($OUT_DIR when VARIANT
# is "."), with MODEL first, then ITERS/DATA_DIR, then the given flags, then
# EXTRA_ARGS (later flags win). Returns llmtrain's exit status; on the
# pre-emption code it requeues the job and exits this shell.
llmtrain_run() {
  local variant=$1; shift
  local dir=$OUT_DIR
  [[ "$variant" == "." ]] || dir=$OUT_DIR/$variant
  mkdir -p "$dir"
  if [[ "${SLURM_RESTART_COUNT:-0}" -gt 0 && -f "$dir/.done" ]]; then
    llmtrain_log "variant '$variant' finished before a requeue: skipped"
    return 0
  fi
  local -a args=()
  [[ -n "${MODEL:-}" ]] && args+=("$MODEL")
  args+=("--out_dir=$dir" "--data_dir=$DATA_DIR")
  [[ -n "${ITERS:-}" ]] && args+=("--max_iters=$ITERS")
  [[ -n "$THREADS_PER_RANK" ]] && args+=("--num_threads=$THREADS_PER_RANK")
  if [[ "${SLURM_RESTART_COUNT:-0}" -gt 0 && -f "$dir/.started" ]]; then
    args+=("--init_from=resume")
  fi
  args+=("$@")
  # shellcheck disable=SC2206
  local -a extra=($EXTRA_ARGS)
  args+=("${extra[@]+"${extra[@]}"}")
  rm -f "$dir/.done"
  touch "$dir/.started"
  local rc=0
  llmtrain_exec "$dir/console.log" "$LLMTRAIN_BIN/llmtrain" "${args[@]}" || rc=$?
  if ((rc == 0)); then
    touch "$dir/.done"
  elif ((rc == LLMTRAIN_REQUEUE_EXIT_CODE)) && [[ -n "${SLURM_JOB_ID:-}" ]]; then
    llmtrain_log "llmtrain stopped early with a checkpoint (exit $rc): requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
  elif [[ -n "${SLURM_JOB_ID:-}" && "$NNODES" -gt 1 ]] && llmtrain_lost_nodes && [[ -n "$LOST_NODES" ]]; then
    # A node of the allocation died (the ranks there are gone, the survivors
    # ended on the watchdog or an MPI error). Requeue now: Slurm notices the
    # node only after SlurmdTimeout, and a job that has ended FAILED by then is
    # not requeued. The requeued job stays COMPLETING until Slurm declares the
    # node DOWN (it cannot confirm the end of the job there), then runs on
    # nodes that remain and resumes from the last checkpoint.
    llmtrain_log "node(s) $LOST_NODES of this job do not answer (llmtrain exit $rc): requeueing job $SLURM_JOB_ID; it runs again, without them, once Slurm has declared them DOWN"
    scontrol requeue "$SLURM_JOB_ID" || llmtrain_log "scontrol requeue $SLURM_JOB_ID failed (Slurm may have requeued it on NODE_FAIL already)"
    exit 0
  else
    llmtrain_log "variant '$variant' failed with exit code $rc (log: $dir/console.log)"
  fi
  return "$rc"
}

# llmtrain_run_variants FLAG_PREFIX VARIANT... : one llmtrain_run per variant
# with "FLAG_PREFIX<variant>" appended (e.g. --dtype= bfloat16). Runs all,
# then returns 1 if any failed, listing them.
llmtrain_run_variants() {
  local prefix=$1; shift
  local v failed=()
  for v in "$@"; do
    llmtrain_run "$v" "$prefix$v" || failed+=("$v")
  done
  llmtrain_report
  if ((${#failed[@]})); then
    llmtrain_log "failed variants: ${failed[*]}"
    return 1
  fi
}

# llmtrain_report: the comparison table of this job's runs (llmtrain-report over
# every run_*.json under $OUT_DIR) at the end of the job output. Informational:
# never changes the job's exit status.
llmtrain_report() {
  local -a logs=()
  mapfile -t logs < <(find "$OUT_DIR" -name 'run_*.json' -type f 2>/dev/null | sort)
  if ((${#logs[@]} == 0)); then
    llmtrain_log "no run logs under $OUT_DIR"
    return 0
  fi
  if [[ -x "$LLMTRAIN_BIN/llmtrain-report" ]]; then
    llmtrain_log "llmtrain-report over ${#logs[@]} run log(s) under $OUT_DIR:"
    "$LLMTRAIN_BIN/llmtrain-report" "${logs[@]}" ||
      llmtrain_log "llmtrain-report exited $? (3 = a log failed the self-check: its figures are not results)"
  else
    llmtrain_log "run logs under $OUT_DIR (no llmtrain-report in $LLMTRAIN_BIN to tabulate them)"
  fi
  return 0
}

# llmtrain_header: checks MODEL (templates set its default after sourcing this
# file) and prints what the job is about to do.
llmtrain_header() {
  if [[ -n "${MODEL:-}" && ! -f "$MODEL" ]]; then
    if [[ -f "$LLMTRAIN_ROOT/$MODEL" ]]; then
      MODEL=$LLMTRAIN_ROOT/$MODEL
    else
      llmtrain_die "MODEL='$MODEL': no such preset file (relative paths are tried against $PWD and $LLMTRAIN_ROOT)"
    fi
  fi
  llmtrain_log "job ${JOB_NAME} (${JOB_ID}): ${NNODES} node(s), ${NTASKS} task(s), launcher ${LLMTRAIN_LAUNCHER}, ${SLURM_GPUS_PER_NODE:-0} GPU(s)/node, threads/rank ${THREADS_PER_RANK:-auto}"
  llmtrain_log "llmtrain: $LLMTRAIN_BIN/llmtrain  model: ${MODEL:-<defaults>}  data: $DATA_DIR  out: $OUT_DIR"
  [[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]] && llmtrain_log "requeued run #${SLURM_RESTART_COUNT}: resuming"
  mkdir -p "$OUT_DIR"
}
