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
  eval_only      eval_only=True writes a summary: the losses and the tokens evaluated
                 (it used to be {}), and the console's last line gives them.
  stopped_before_eval
                 SIGUSR1 before the first evaluation: the console says "no eval yet",
                 never "final train loss 0.0000"; the summary says "stopped".
  nan_weights    a learning rate of 1e38 overflows the weights after one step: every
                 later loss and the evaluations are NaN. The log holds no null: the
                 non-finite figures are absent and "non_finite" names them
                 (docs/run-log.md), the NaN steps are bad_step events.
  mpirun_requeue jobs/common.sh with LLMTRAIN_LAUNCHER=mpirun, 3 s iterations (longer
                 than Open MPI's 1 s SIGTERM grace): SIGTERM to the job shell ends the
                 run after the current iteration with a checkpoint and exit 124 (the
                 code the templates requeue on), as with srun.
  mpirun_requeue_all  the same, with SIGTERM to every process of the job as Slurm sends
                 it at the time limit (the job shell, mpirun and the ranks): mpirun
                 runs with SIGTERM blocked (jobs/common.sh), since on it Open MPI 4.1
                 ends the job itself and exits 1 (issue 49) and Open MPI 5 (PRRTE)
                 kills the ranks within 0.5 s, before any checkpoint (issue 48);
                 the ranks take the SIGTERM themselves, write the checkpoint and
                 mpirun exits 124 with them.

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


def job_processes(root):
    """root and all its descendants (from /proc), as Slurm's job container holds them."""
    children = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(pid))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


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
elif case == "eval_only":
    data = e.prepare()
    e.train(2, data, "out", *COMMON, "--max_iters=4", "--checkpoint_interval=4")
    p, log = e.train(2, data, "out", *COMMON, "--init_from=resume", "--eval_only=True", "--eval_iters=3")
    s = log["summary"]
    # eval_iters x accumulation x batch_size x block_size x ranks, per split (tiny_llama.cfg: batch 8, block 128)
    per_split = 3 * 1 * 8 * 128 * 2
    assert s.get("status") == "completed" and s.get("eval_only") is True and s.get("iteration") == 4, s
    assert s.get("train_tokens") == per_split and s.get("val_tokens") == per_split, s
    assert s.get("tokens_evaluated") == 2 * per_split, s
    ev = log["eval_results"][-1]
    assert s["val_loss"] == ev["val_loss"] and s["train_loss"] == ev["train_loss"] and 0 < s["val_loss"] < 10, (s, ev)
    assert "done: eval only (iteration 4): train loss" in p.stdout, p.stdout[-2000:]
    print(f"eval_only summary: val loss {s['val_loss']:.4f}, {s['tokens_evaluated']} tokens evaluated")

elif case == "stopped_before_eval":
    data = e.prepare()
    cmd = e.mpi(1, e.llmtrain(), os.path.join(e.source, "inputs", "tiny_llama.cfg"), f"--data_dir={data}",
                "--out_dir=out", e.CPU, *COMMON, "--max_iters=100")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    watchdog = threading.Timer(180, p.kill)
    watchdog.start()
    seen, lines = 0, []
    for line in p.stdout:
        lines.append(line)
        if line.startswith("iter "):
            seen += 1
            if seen == 3:
                p.send_signal(signal.SIGUSR1)  # mpirun forwards it; the run stops after a checkpoint
                break
    out = "".join(lines) + p.communicate(timeout=120)[0]
    watchdog.cancel()
    assert p.returncode == 124, f"exit code {p.returncode}\n{out}"
    assert "final train loss" not in out, out[-2000:]
    end = [l for l in out.splitlines() if l.startswith("stopped by signal")]
    assert end and "no eval yet (eval_interval=1000)" in end[-1] and "0.0000" not in end[-1], out[-2000:]
    with open(e.run_logs("out")[-1]) as f:
        log = json.load(f)
    assert log["summary"]["status"] == "stopped" and log["eval_results"] == [], log["summary"]
    print(f"stopped before the first eval: '{end[-1]}'")

elif case == "nan_weights":
    data = e.prepare()
    p, log = e.train(1, data, "out", "--eval_iters=1", "--log_interval=1", "--eval_interval=3", "--max_iters=6",
                     "--learning_rate=1e38", "--min_lr=0", "--warmup_iters=0", "--max_bad_steps=100")
    with open(e.run_logs("out")[-1]) as f:
        text = f.read()
    assert "null" not in text and "NaN" not in text, "a null or NaN in the run log"
    its = log["training_iterations"]
    bad = [r["iter"] for r in its if "bad_step" in r]
    assert bad and all("loss" not in its[i] for i in bad), its
    assert [ev["iter"] for ev in log["events"] if ev["kind"] == "bad_step"] == bad, log["events"]
    assert len(log["eval_results"]) == 2, log["eval_results"]
    for ev in log["eval_results"]:
        assert "val_loss" not in ev and "val_loss" in ev.get("non_finite", []), ev
    s = log["summary"]
    assert "final_loss" not in s and "final_loss" in s.get("non_finite", []), s
    print(f"NaN weights: bad steps {bad}; eval_results {log['eval_results']}; summary non_finite {s['non_finite']}")

elif case in ("mpirun_requeue", "mpirun_requeue_all"):
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
    # LLMTRAIN_MPIRUN_GRACE_S: mpirun never gets the SIGTERM here (the job shell turns it into USR1), but when
    # the ranks exit 124 it ends the job as on an abort and waits twice that grace (30 s by default) before
    # it returns, although no rank is left: 5 s keeps the test's minute for the checks.
    env = dict(os.environ, LLMTRAIN_TEST_ITER_SLEEP_MS="3000", LLMTRAIN_MPIRUN_GRACE_S="5")
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
                if case == "mpirun_requeue":
                    p.send_signal(signal.SIGTERM)  # as Slurm signals the batch shell
                else:
                    tree = job_processes(p.pid)  # as Slurm signals every process of the job
                    for pid in tree:
                        try:
                            os.kill(pid, signal.SIGTERM)
                        except ProcessLookupError:
                            pass
                    print(f"SIGTERM to {len(tree)} processes of the job (shell, mpirun, ranks, tail)")
                break
    rest = p.communicate(timeout=120)[0]
    watchdog.cancel()
    with open(e.run_logs("out")[-1]) as f:
        log = json.load(f)
    ckpts = sorted(os.listdir(os.path.join(work, "out", "checkpoints")))
    print(f"SIGTERM to the job shell (mpirun launcher): exit {p.returncode} after {time.time() - t0:.1f} s; "
          f"checkpoints {ckpts}; summary status {log['summary'].get('status')}")
    assert p.returncode == 124, f"exit {p.returncode}, expected 124 (requeue)\n{rest}"
    # mpirun's own exit code, not the job shell's fallback from the ranks' log line (Open MPI 4.1's
    # "mpirun ends the job itself"): the SIGTERM reached mpirun and it did not act on it.
    assert "llmtrain_exec returned 124" in rest and "after the ranks stopped with a checkpoint" not in rest, rest
    n = len(log["training_iterations"])
    assert log["summary"]["status"] == "stopped" and checkpoint_name(n) in ckpts, (n, ckpts, log["summary"])
else:
    sys.exit(f"unknown case {case}")
print("PASS")
