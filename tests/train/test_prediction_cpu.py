#!/usr/bin/env python3
"""The step-time prediction on this CPU, on a shape the calibration did not see (driven by CTest).

  cross_shape  `llmtrain --calibrate` measures a profile at tiny_llama's shapes (d 64, 1 and 2
               ranks, each rank count its own profile: the threads per rank differ); the quick
               start's model (d 128, batch 16, inputs/quickstart.cfg) then trains on 1 and 2
               ranks with that profile, and each run's summary.prediction.measured_over_predicted
               must be within 15% of 1 (docs/performance-model.md, "Validation on this machine").

A timing check: it needs the cores to itself. CTest runs it alone (RUN_SERIAL, label `perf`), and
it skips (77) when the load average is above the cores before it starts (after waiting up to 150 s for
it to fall: it lags the suite's other tests by a minute), or rose above them while
it ran and a run missed: there the machine, not the model, sets the step time.

Usage: test_prediction_cpu.py BUILD_DIR SOURCE_DIR MPIEXEC CASE
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common  # noqa: E402

case = sys.argv[4]
work = e2e_common.setup(sys.argv, "prediction_cpu_" + case)
run, mpi, prepare, source, bin_dir = e2e_common.run, e2e_common.mpi, e2e_common.prepare, e2e_common.source, \
    e2e_common.bin_dir
TOLERANCE = 0.15


def busy():
    """LLMTRAIN_PERF_ANYWAY=1: run and judge whatever the load (to see the figures on a busy machine)."""
    load = os.getloadavg()[0]
    return load > (os.cpu_count() or 1) and os.environ.get("LLMTRAIN_PERF_ANYWAY") != "1", load


def settled(wait_s=150.0, poll_s=5.0):
    """busy() once the load average has had time to fall: it lags by about a minute, so right
    after the suite's other tests (CTest runs this one alone, but straight after them) it still
    counts their load. Waits while it falls, at most wait_s; a machine busy with other work stays
    busy and the test skips."""
    import time
    deadline = time.monotonic() + wait_s
    is_busy, load = busy()
    while is_busy and time.monotonic() < deadline:
        time.sleep(poll_s)
        is_busy, load = busy()
    return is_busy, load


if case == "cross_shape":
    is_busy, load = settled()
    if is_busy:
        print(f"SKIP: load average {load:.1f} on {os.cpu_count()} cores: a timing check needs them idle")
        sys.exit(77)
    data = prepare()
    llmtrain = os.path.join(bin_dir, "llmtrain")
    tiny = os.path.join(source, "inputs", "tiny_llama.cfg")
    quick = os.path.join(source, "inputs", "quickstart.cfg")
    failures = []
    for ranks in (1, 2):
        cal = f"cal{ranks}"
        run(mpi(ranks, llmtrain, tiny, f"--data_dir={data}", f"--out_dir={cal}", e2e_common.CPU, "--calibrate"))
        profile = os.path.join(work, cal, "device_profile.json")
        out = f"quick{ranks}"
        run(mpi(ranks, llmtrain, quick, f"--data_dir={data}", f"--out_dir={out}", e2e_common.CPU,
                f"--device_profile={profile}", "--max_iters=60", "--eval_interval=1000", "--eval_iters=1",
                "--log_interval=20", f"--batch_size={32 // ranks}"))
        logs = e2e_common.run_logs(out)
        assert len(logs) == 1, logs
        with open(logs[0]) as f:
            summary = json.load(f)["summary"]
        pred = summary["prediction"]
        ratio = pred["measured_over_predicted"]
        phases = {k: (round(v["predicted_ms"], 1), round(v["measured_ms"], 1)) for k, v in pred["phases"].items()}
        print(f"{ranks} rank(s): quickstart shape, profile calibrated on tiny_llama: measured / predicted "
              f"{ratio:.3f} (step {summary.get('mean_dt_ms', 0):.1f} ms against "
              f"{1e3 * pred['step_time_s']:.1f} ms); predicted/measured ms by phase {phases}")
        if abs(ratio - 1.0) > TOLERANCE:
            failures.append(f"{ranks} rank(s): measured / predicted {ratio:.3f}")
    now_busy, load = busy()
    if failures and now_busy:
        print(f"SKIP: the load average rose to {load:.1f} during the runs: {failures}")
        sys.exit(77)
    assert not failures, f"outside +-{TOLERANCE:.0%}: {failures}"
else:
    sys.exit(f"unknown case {case}")
