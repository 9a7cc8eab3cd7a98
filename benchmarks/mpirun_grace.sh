#!/usr/bin/env bash
# mpirun_grace.sh [NP]: measures how Open MPI's mpirun treats a stop signal
# (docs/guide.md, "SIGTERM and mpirun"): NP ranks of a shell script that log
# the time of every signal they get; mpirun is sent SIGTERM (default grace,
# then odls_base_sigkill_timeout=3, then with SIGTERM blocked in mpirun as
# jobs/common.sh starts it, the ranks signalled too as Slurm does) and SIGUSR1
# two seconds after the start. Prints, per case, when the ranks got SIGTERM /
# SIGUSR1, when mpirun ended and its exit code (the ranks exit 124 three
# seconds after a signal). Open MPI 4.1 (ORTE) and 5 (PRRTE's prterun) alike.
set -uo pipefail
NP=${1:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=${PRTE_MCA_rmaps_default_mapping_policy:-:oversubscribe}
echo "$(mpirun --version 2>&1 | head -1)"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat >"$dir/rank.sh" <<'RANK'
#!/bin/bash
now() { date +%s.%N; }
stop() { echo "$1 $(now)" >>"$LOG.$OMPI_COMM_WORLD_RANK"; sleep 3; exit 124; }
trap 'stop TERM' TERM; trap 'stop USR1' USR1
while :; do sleep 0.05; done
RANK
chmod +x "$dir/rank.sh"
printf '| signal to mpirun | grace (odls_base_sigkill_timeout) | ranks got it at | mpirun ended at | mpirun exit |\n|---|---|---|---|---|\n'
for c in "TERM 1" "TERM 3" "TERM 1 blocked" "USR1 1"; do
  set -- $c
  rm -f "$dir"/log.*
  shield=(); [[ "${3:-}" == blocked ]] && shield=(env --block-signal=TERM)
  LOG=$dir/log OMPI_MCA_odls_base_sigkill_timeout=$2 "${shield[@]}" mpirun -np "$NP" "$dir/rank.sh" >/dev/null 2>&1 &
  pid=$!
  sleep 2
  t0=$(date +%s.%N); kill -"$1" "$pid"
  [[ "${3:-}" == blocked ]] && pkill -"$1" -f "$dir/rank.sh"  # Slurm signals the ranks too
  wait "$pid"; rc=$?; t1=$(date +%s.%N)
  got=$(cat "$dir"/log.* 2>/dev/null | awk -v t0="$t0" '{printf "%s +%.2f s  ", $1, $2 - t0}')
  printf '| SIG%s%s | %s s | %s | +%.2f s | %s |\n' "$1" "${3:+ ($3 in mpirun; ranks signalled too)}" "$2" "${got:-never}" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$rc"
done
