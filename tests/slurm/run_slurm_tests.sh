#!/usr/bin/env bash
# The job templates on a real Slurm: starts a private single-node cluster
# (scripts/slurm-local.sh), then through sbatch:
#   1. jobs/prepare_data.sbatch   2 MPI ranks tokenize a few SOTU speeches (byte tokenizer)
#   2. jobs/tier1.sbatch          1 rank, one (count-only) GPU requested, srun --mpi=pmix
#   3. a failing tier1 job        (unknown config key) must fail the --wait exit code
#   4. jobs/ablation_grad_accum.sbatch   2 ranks, 2 variants, LLMTRAIN_LAUNCHER=mpirun,
#                                        submitted through jobs/submit.sh
#   5. jobs/submit_scaling.sh weak       1 and 2 ranks + the llmtrain-report --scaling step
#   6. jobs/memory_max_batch.sbatch      finds the out-of-memory limit (under ulimit -v)
#   7. pre-emption: a running tier1 job (2 ranks, mpirun) gets SIGUSR1 as Slurm's
#      --signal=B:USR1@120 sends it (scancel --signal=USR1 --batch), checkpoints,
#      exits 124, requeues itself, resumes from the checkpoint and finishes with
#      the losses of an uninterrupted job, bit for bit
# and checks every job's exit code (wait_job, as sbatch --wait; no accounting here, so no
# sacct), its output file logs/<name>_<id>.out, and the run logs it left
# (run_*.json with training_iterations, world size, the variant's settings).
#
# Env (set by CTest): LLMTRAIN_SOURCE_DIR, LLMTRAIN_BUILD_DIR.
# Exit: 0 pass, 1 fail, 77 skip (cannot start Slurm here: not root, no slurm-wlm/munge,
# or the SOTU corpus cannot be fetched). The daemons are stopped on every exit.
set -uo pipefail

src=${LLMTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${LLMTRAIN_BUILD_DIR:-$src/build}
bin=$build/bin
work=$build/slurm-test
ITERS=3

# shellcheck source=tests/slurm/slurm_test_lib.sh
source "$src/tests/slurm/slurm_test_lib.sh"
need_binaries

cluster=$work/cluster
# A run killed hard (CTest timeout) cannot run its trap: stop what it left.
[[ -d "$cluster" ]] && "$src/scripts/slurm-local.sh" stop "$cluster" >/dev/null 2>&1
rm -rf "$work"
mkdir -p "$work/logs"

start_cluster "single-node Slurm" "$src/scripts/slurm-local.sh" --cpus 2 --gpus 8
# shellcheck disable=SC1091
source "$cluster/env.sh"

cd "$work" || fail "cannot cd to $work"
export LLMTRAIN_BIN=$bin LLMTRAIN_ROOT=$src OUT_ROOT=$work/out
export OMPI_MCA_rmaps_base_oversubscribe=1
# sbatch exports this environment into the job: keep the tests' CPU settings.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1


# check_runlog DIR ITERS WORLD [KEY=VALUE ...] : DIR/run_*.json holds ITERS
# training_iterations records, world_size WORLD and the given config values.
check_runlog() {
  python3 - "$@" <<'PY' || fail "run log check failed for $1"
import glob, json, sys
d, iters, world, *kv = sys.argv[1:]
logs = sorted(glob.glob(f"{d}/run_*.json"))
if not logs:
    sys.exit(f"no run_*.json in {d}")
log = json.load(open(logs[-1]))
its = log.get("training_iterations")
if not isinstance(its, list) or len(its) != int(iters):
    sys.exit(f"{logs[-1]}: training_iterations has {None if its is None else len(its)} records, expected {iters}")
bad = [r for r in its if not (r.get("loss", float("nan")) == r.get("loss")) or r.get("loss", 0) <= 0]
if bad:
    sys.exit(f"{logs[-1]}: records without a finite positive loss: {bad[:1]}")
def find(o, key):
    if isinstance(o, dict):
        if key in o:
            return o[key]
        for v in o.values():
            r = find(v, key)
            if r is not None:
                return r
    return None
cfg = find(log, "config") or {}
ws = cfg.get("world_size", find(log, "world_size"))
if ws is None or int(ws) != int(world):
    sys.exit(f"{logs[-1]}: world_size {ws}, expected {world}")
for item in kv:
    k, v = item.split("=", 1)
    got = cfg.get(k)
    if str(got).lower() != v.lower():
        sys.exit(f"{logs[-1]}: config {k} = {got!r}, expected {v}")
print(f"ok: {logs[-1]}: {len(its)} iterations, world size {ws}" + (f", {' '.join(kv)}" if kv else ""))
PY
}

# ---- 1. data: MPI-parallel tokenization through prepare_data.sbatch ---------
note "fetching the SOTU corpus"
sotu_inputs 6
inputs="${all_txt[*]}"
export DATA_DIR=$work/data
note "prepare_data.sbatch on 2 ranks"
INPUTS=$inputs TOKENIZER=byte sub --ntasks-per-node=2 --cpus-per-task=1 --time=10 \
  "$src/jobs/prepare_data.sbatch"
((jobrc == 0)) || { show_log "$jobid"; fail "prepare_data job $jobid exited $jobrc"; }
if [[ ! -f "$DATA_DIR/index.json" ]] || ! compgen -G "$DATA_DIR/train_*.h5" >/dev/null; then
  show_log "$jobid"; fail "prepare_data job $jobid left no index.json / train shards in $DATA_DIR"
fi
grep -q "on 2 ranks" "$(joblog "$jobid")" || { show_log "$jobid"; fail "prepare_data did not run on 2 ranks"; }
echo "ok: prepare_data job $jobid"

# The tiny CPU model, given to the templates through MODEL.
{ cat "$src/tests/slurm/tiny.cfg"; echo "lr_decay_iters = 100"; } >"$work/tiny.cfg"
export MODEL=$work/tiny.cfg ITERS

# ---- 2. tier1 on one rank with a GPU request, srun --mpi=pmix ---------------
note "tier1.sbatch (1 rank, srun --mpi=pmix)"
sub --ntasks-per-node=1 --gpus-per-node=1 --cpus-per-task=1 --time=10 "$src/jobs/tier1.sbatch"
((jobrc == 0)) || { show_log "$jobid"; fail "tier1 job $jobid exited $jobrc"; }
log=$(joblog "$jobid"); [[ "$log" == */tier1_"$jobid".out ]] || fail "tier1 output is not logs/tier1_$jobid.out"
grep -q "launcher srun" "$log" || { show_log "$jobid"; fail "tier1 did not use the srun launcher"; }
grep -q "run log: $OUT_ROOT/tier1_$jobid/run_" "$log" || { show_log "$jobid"; fail "llmtrain's console output is not in the job output"; }
grep -Eq "^config +GPUs +batch +accum .*MFU %" "$log" || { show_log "$jobid"; fail "tier1's output does not end with llmtrain-report's comparison table"; }
check_runlog "$OUT_ROOT/tier1_$jobid" "$ITERS" 1 compile=true use_dataloader=false dtype=bfloat16

# ---- 3. a failing job must fail -----------------------------------------------
note "tier1.sbatch with a bad key must fail"
EXTRA_ARGS="--no_such_key=1" sub --ntasks-per-node=1 --gpus-per-node=0 --cpus-per-task=1 --time=10 \
  "$src/jobs/tier1.sbatch"
((jobrc != 0)) || { show_log "$jobid"; fail "job $jobid with an unknown key exited 0"; }
grep -q "no_such_key" "$(joblog "$jobid")" || { show_log "$jobid"; fail "job $jobid's output does not name the bad key"; }
echo "ok: bad-key job $jobid failed with exit code $jobrc and named the key"

# ---- 4. an ablation: 2 ranks, 2 variants, mpirun launcher ------------------
# Submitted through jobs/submit.sh, which maps GPUS_PER_NODE/TASKS_PER_NODE/... to sbatch options.
note "ablation_grad_accum.sbatch via jobs/submit.sh (2 ranks, mpirun, VARIANTS='1 2')"
out=$(VARIANTS="1 2" LLMTRAIN_LAUNCHER=mpirun GPUS_PER_NODE=0 TASKS_PER_NODE=2 CPUS_PER_TASK=1 TIME=10 \
      "$src/jobs/submit.sh" "$src/jobs/ablation_grad_accum.sbatch" --parsable 2>"$work/sbatch.err")
jobid=$(head -n1 <<<"$out" | cut -d';' -f1)
[[ "$jobid" =~ ^[0-9]+$ ]] || { cat "$work/sbatch.err" >&2; fail "jobs/submit.sh did not return a job id"; }
wait_job "$jobid"
grep -q "2 task(s)" "$(joblog "$jobid")" || { show_log "$jobid"; fail "submit.sh: TASKS_PER_NODE=2 did not give 2 tasks"; }
((jobrc == 0)) || { show_log "$jobid"; fail "ablation job $jobid exited $jobrc"; }
grep -q "launcher mpirun" "$(joblog "$jobid")" || { show_log "$jobid"; fail "ablation did not use mpirun"; }
for v in 1 2; do
  check_runlog "$OUT_ROOT/ablation_grad_accum_$jobid/$v" "$ITERS" 2 gradient_accumulation_steps=$v
done

# ---- 5. weak scaling over 1 and 2 ranks + the report step -------------------
note "submit_scaling.sh weak (SCALE_BY=tasks, COUNTS='1 2')"
export STUDY_DIR=$work/out/weak_study
SCALE_BY=tasks COUNTS="1 2" GPUS_PER_NODE=0 CPUS_PER_TASK=1 WAIT=1 BATCH_SIZE=2 \
  "$src/jobs/submit_scaling.sh" weak --time=10 >"$work/scaling.out" 2>&1
rc=$?
cat "$work/scaling.out"
((rc == 0)) || { tail -n 30 "$work"/logs/weak_scaling_*.out; fail "scaling study: report job exited $rc"; }
check_runlog "$STUDY_DIR/ws0001" "$ITERS" 1 batch_size=2
check_runlog "$STUDY_DIR/ws0002" "$ITERS" 2 batch_size=2
[[ -s "$STUDY_DIR/scaling_report.txt" ]] || fail "no $STUDY_DIR/scaling_report.txt"
# The scaling table has a row per world size (1 and 2), and the 2-rank row of a
# weak study carries a weak-scaling efficiency, not n/a.
python3 - "$STUDY_DIR/scaling_report.txt" <<'PY' || fail "scaling report lacks the 1- and 2-rank rows with a weak efficiency"
import sys
lines = open(sys.argv[1]).read().splitlines()
try:
    h = next(i for i, l in enumerate(lines) if l.split()[:1] == ["config"] and "weak" in l)
except StopIteration:
    sys.exit("no scaling table header")
rows = {}
for l in lines[h + 1:]:
    f = l.split()
    if len(f) >= 7 and f[1].isdigit():
        rows[int(f[1])] = f
    elif not l.strip():
        break
if sorted(rows) != [1, 2]:
    sys.exit(f"world sizes in the table: {sorted(rows)}")
weak = rows[2][-3]  # the columns end: strong %, weak %, comm ms, comm %
if weak == "n/a" or not 0 < float(weak) <= 200:
    sys.exit(f"2-rank weak efficiency: {weak}")
print(f"ok: scaling table rows for 1 and 2 ranks, weak efficiency at 2 ranks {weak} %")
PY
echo "--- scaling report"; cat "$STUDY_DIR/scaling_report.txt"

# ---- 6. memory_max_batch: out-of-memory found and told apart --------------
# A 3 GB address-space limit (sbatch propagates the submitting shell's limits
# to the job and srun to the ranks) makes batch_size=4096 fail to allocate
# (~1 GB for the attention scores alone) while 1 and 2 fit.
note "memory_max_batch.sbatch (BATCH_SIZES='1 2 4096' under ulimit -v 3 GB)"
(
  ulimit -v 3000000
  BATCH_SIZES="1 2 4096" ITERS=1 sub --ntasks-per-node=1 --gpus-per-node=1 --cpus-per-task=1 --time=10 \
    "$src/jobs/memory_max_batch.sbatch"
  echo "$jobid $jobrc" >"$work/memjob"
) || fail "memory_max_batch submission failed"
read -r jobid jobrc <"$work/memjob"
((jobrc == 0)) || { show_log "$jobid"; fail "memory_max_batch job $jobid exited $jobrc"; }
grep -q "RESULT: largest batch_size that fits = 2 (first out of memory at 4096)" "$(joblog "$jobid")" ||
  { show_log "$jobid"; fail "memory_max_batch job $jobid did not report 2 / 4096"; }
python3 - "$OUT_ROOT/memory_max_batch_$jobid/max_batch.json" <<'PY' || fail "max_batch.json is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["largest_batch_size_that_fits"] == 2 and r["first_out_of_memory"] == 4096, r
print("ok:", sys.argv[1], r)
PY

# ---- 7. pre-emption: signal -> checkpoint -> 124 -> requeue -> resume ----------
note "pre-emption: tier1 (2 ranks, mpirun) signalled mid-run, requeued, resumed"
export LLMTRAIN_LAUNCHER=mpirun
# mpirun gets USR1 here, never SIGTERM, so its grace (LLMTRAIN_MPIRUN_GRACE_S,
# 30 s) never spares a rank; but when the ranks exit 124 it ends the job as on an
# abort and waits twice that grace, with no rank left, before the job can requeue.
export LLMTRAIN_MPIRUN_GRACE_S=5
LONG=600
ITERS=$LONG sub --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --time=10 "$src/jobs/tier1.sbatch"
((jobrc == 0)) || { show_log "$jobid"; fail "uninterrupted tier1 job $jobid exited $jobrc"; }
ref_dir=$OUT_ROOT/tier1_$jobid
pre=$(ITERS=$LONG sbatch --parsable --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --time=10 \
      "$src/jobs/tier1.sbatch" 2>"$work/sbatch.err") || { cat "$work/sbatch.err"; fail "sbatch of the pre-emption job failed"; }
pre=${pre%%;*}
pre_dir=$OUT_ROOT/tier1_$pre
# Wait until it trains (iteration 100 printed), then signal the batch shell as Slurm does.
for ((i = 0; i < 600; i++)); do
  grep -q "^iter 100/" "$pre_dir/console.log" 2>/dev/null && break
  sleep 0.2
done
grep -q "^iter 100/" "$pre_dir/console.log" 2>/dev/null || { show_log "$pre"; fail "job $pre never reached iteration 100"; }
t_signal=$(date +%s.%N)
scancel --signal=USR1 --batch "$pre" || fail "scancel --signal=USR1 --batch $pre failed"
# It must come back (requeued: SLURM_RESTART_COUNT=1) and complete. Slurm holds a
# requeued job about two minutes (its BeginTime) before it runs again; the test
# lets it start at once, as `scontrol update ... StartTime=now` would on a cluster.
state=""
released=0 pending_since=0
for ((i = 0; i < 900; i++)); do
  state=$(scontrol show job "$pre" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  restarts=$(scontrol show job "$pre" 2>/dev/null | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
  # Released 2 s after the requeue at the earliest: slurmd refuses a batch
  # credential issued in the same second as the revocation of the job's last
  # run ("Job credential revoked"), and the job would end FAILED.
  if [[ "$state" == PENDING && "${restarts:-0}" -ge 1 && $released == 0 ]]; then
    ((pending_since > 0)) || pending_since=$SECONDS
    if ((SECONDS - pending_since >= 2)); then scontrol update JobId="$pre" StartTime=now && released=1; fi
  fi
  [[ "$state" == COMPLETED && "${restarts:-0}" -ge 1 ]] && break
  [[ "$state" == FAILED || "$state" == CANCELLED || "$state" == TIMEOUT ]] && break
  sleep 0.2
done
[[ "$state" == COMPLETED ]] || { show_log "$pre"; fail "pre-empted job $pre ended $state (restarts ${restarts:-0})"; }
log=$(joblog "$pre")
grep -q "exit 124): requeueing job $pre" "$log" || { show_log "$pre"; fail "job $pre did not requeue itself on exit 124"; }
grep -q "requeued run #1: resuming" "$log" || { show_log "$pre"; fail "the requeued job did not say it resumes"; }
grep -q "resumed from $pre_dir/checkpoints/ckpt_" "$log" || { show_log "$pre"; fail "the requeued run did not resume from its checkpoint"; }
python3 - "$ref_dir" "$pre_dir" "$LONG" "$t_signal" <<'PY' || { show_log "$pre"; fail "the resumed job's losses differ from the uninterrupted job's"; }
import glob, json, os, sys
ref_dir, pre_dir, iters, t_signal = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def losses(d):
    out = []
    for p in sorted(glob.glob(f"{d}/run_*.json")):
        out += [r["loss"] for r in json.load(open(p))["training_iterations"]]
    return out
a, b = losses(ref_dir), losses(pre_dir)
logs = sorted(glob.glob(f"{pre_dir}/run_*.json"))
assert len(logs) == 2, f"expected the stopped and the resumed run logs, found {logs}"
stopped = json.load(open(logs[0]))
n = len(stopped["training_iterations"])
assert 100 <= n < iters and stopped["checkpoints"][-1]["reason"] == "stop signal", (n, stopped["checkpoints"])
assert len(a) == len(b) == iters and a == b, f"{len(a)} vs {len(b)} iterations; first difference at " \
    f"{next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)}"
resumed = json.load(open(logs[1]))
print(f"ok: signalled at iteration {n}, checkpointed, exit 124, requeued, resumed at "
      f"{resumed['startup_info']['resumed_from']['iteration']}; {iters} iterations equal the uninterrupted job's; "
      f"signal to resumed job's run log: {os.path.getmtime(logs[1]) - t_signal:.1f} s")
PY
unset LLMTRAIN_LAUNCHER LLMTRAIN_MPIRUN_GRACE_S

echo "PASS: all Slurm job-template checks"
