#!/usr/bin/env python3
"""How a run's record survives its end (the run log of a failed or killed run).

  failed_rank    an error on rank 1 only: before the job is aborted, rank 0 writes
                 the iterations not yet flushed, the error with its rank, and a summary
                 with status "failed".
  sigterm_flush  SIGTERM to mpirun, which forwards it and kills the ranks about a
                 second later, while iterations take longer than that: the run log
                 already holds every finished iteration and the signal (flushed when
                 the signal arrived, not at the next periodic flush 10 s later).
                 Its summary says status "stopped" with the signal (written when the
                 signal arrived), not {}.
  completed      a normal run's summary says "completed"; a signalled one's "stopped".
  mpirun_requeue jobs/common.sh with LLMTRAIN_LAUNCHER=mpirun, 3 s iterations (longer
                 than Open MPI's 1 s SIGTERM grace): SIGTERM to the job shell ends the
                 run after the current iteration with a checkpoint and exit 124 (the
                 code the templates requeue on), as with srun.

Usage: test_run_end.py BUILD_DIR SOURCE_DIR MPIEXEC CASE
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as e  # noqa: E402

case = sys.argv[4]


def checkpoint_name(iteration):
    return f"ckpt_{iteration:08d}.h5"


work = e.setup(sys.argv, "run_end_" + case)
COMMON = ["--eval_iters=1", "--log_interval=1", "--eval_interval=1000"]

if case == "failed_rank":
    data = e.prepare()
    p, log = e.train(2, data, "out", *COMMON, "--max_iters=50", expect_ok=False,
                     env={"LLMTRAIN_TEST_FAIL_AT": "1:6"})
    assert p.returncode != 0, "the job did not fail"
    assert len(log["training_iterations"]) == 6, f"{len(log['training_iterations'])} iterations logged, expected 6"
    assert log["errors"] == ["[rank 1] injected failure at iteration 6 (LLMTRAIN_TEST_FAIL_AT)"], log["errors"]
    s = log["summary"]
    assert s["status"] == "failed" and s["error_rank"] == 1 and "injected failure" in s["error"], s
    print(f"rank 1 failed at iteration 6: rank 0's run log has 6 iterations, the error with its rank, status {s['status']}")

elif case == "sigterm_flush":
    data = e.prepare()
    cmd = e.mpi(2, e.llmtrain(), os.path.join(e.source, "inputs", "tiny_llama.cfg"), f"--data_dir={data}",
                "--out_dir=out", e.CPU, "--max_iters=100", *COMMON)
    env = dict(os.environ, LLMTRAIN_TEST_ITER_SLEEP_MS="1500")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work, env=env)
    watchdog = threading.Timer(240, p.kill)
    watchdog.start()
    seen = 0
    for line in p.stdout:
        if line.startswith("iter "):
            seen += 1
            if seen == 4:
                t0 = time.time()
                p.send_signal(signal.SIGTERM)  # mpirun forwards it, then kills the ranks
                break
    rest = p.communicate(timeout=120)[0]
    watchdog.cancel()
    with open(e.run_logs("out")[-1]) as f:
        log = json.load(f)
    n = len(log["training_iterations"])
    kinds = [ev["kind"] for ev in log["events"]]
    print(f"SIGTERM after iteration line 4: mpirun exited {p.returncode} after {time.time() - t0:.1f} s; "
          f"run log: {n} iterations, events {kinds}")
    assert n >= 4, f"only {n} iterations in the run log\n{rest}"
    assert "signal" in kinds, log["events"]
    s = log["summary"]
    assert s.get("status") == "stopped" and s.get("stop_signal") == signal.SIGTERM, s
    print(f"summary when the ranks were killed: {s}")

elif case == "completed":
    data = e.prepare()
    _, log = e.train(1, data, "out", *COMMON, "--max_iters=3")
    assert log["summary"]["status"] == "completed", log["summary"]
    print("a normal run's summary: status completed")
elif case == "mpirun_requeue":
    data = e.prepare()
    script = os.path.join(work, "job.sh")
    with open(script, "w") as f:
        f.write(f"""export LLMTRAIN_LAUNCHER=mpirun NTASKS=2 LLMTRAIN_BIN={e.bin_dir} OUT_ROOT={work}
source {e.source}/jobs/common.sh
llmtrain_exec {work}/console.log "$LLMTRAIN_BIN/llmtrain" {e.source}/inputs/tiny_llama.cfg --data_dir={data} \\
  --out_dir={work}/out {e.CPU} --max_iters=100 {' '.join(COMMON)}
rc=$?
echo "llmtrain_exec returned $rc"
exit $rc
""")
    env = dict(os.environ, LLMTRAIN_TEST_ITER_SLEEP_MS="3000")
    p = subprocess.Popen(["bash", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work,
                         env=env)
    watchdog = threading.Timer(240, p.kill)
    watchdog.start()
    seen = 0
    for line in p.stdout:
        if line.startswith("iter "):
            seen += 1
            if seen == 2:
                t0 = time.time()
                p.send_signal(signal.SIGTERM)  # as Slurm signals the batch shell
                break
    rest = p.communicate(timeout=120)[0]
    watchdog.cancel()
    with open(e.run_logs("out")[-1]) as f:
        log = json.load(f)
    ckpts = sorted(os.listdir(os.path.join(work, "out", "checkpoints")))
    print(f"SIGTERM to the job shell (mpirun launcher): exit {p.returncode} after {time.time() - t0:.1f} s; "
          f"checkpoints {ckpts}; summary status {log['summary'].get('status')}")
    assert p.returncode == 124, f"exit {p.returncode}, expected 124 (requeue)\n{rest}"
    n = len(log["training_iterations"])
    assert log["summary"]["status"] == "stopped" and checkpoint_name(n) in ckpts, (n, ckpts, log["summary"])
else:
    sys.exit(f"unknown case {case}")
print("PASS")
