#!/usr/bin/env python3
"""llmtrain-plan --fit against an independent fit of the same run logs.

The oracle is PyTorch (float64): the approach-3 objective written again from
the paper (Huber, delta 1e-3, on log L_pred - log L_obs with
log L_pred = logsumexp(a - alpha log N, b - beta log D, e)) and minimized with
torch.optim.LBFGS (strong-Wolfe line search) from a grid of starting points.
Both fits read the same numbers: the run logs this script writes (synthetic
final val losses of a known law, 1% noise, one diverged run), through the
binary's own run-log reader. The binary must reach an objective no worse than
the oracle's and the same constants.

usage: test_fit_oracle.py BUILD_DIR
"""
import itertools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
DELTA = 1e-3
TRUTH = dict(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al. 2022, approach 3


def law(p, n, d):
    return p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]


def write_logs(out):
    rng = np.random.default_rng(20240416)
    runs = []
    # An IsoFLOP-like spread: five sizes, each at five token counts.
    for n in (2e7, 6e7, 2e8, 6e8, 2e9):
        for ratio in (2.0, 6.0, 20.0, 60.0, 200.0):
            d = n * ratio
            runs.append((n, d, law(TRUTH, n, d) * float(np.exp(rng.normal(0.0, 0.01)))))
    n, d, loss = runs[11]
    runs[11] = (n, d, loss * 1.25)  # one diverged run: the Huber loss must not chase it
    os.makedirs(out)
    for i, (n, d, loss) in enumerate(runs):
        # One iteration of D tokens: D = iterations x tokens_per_iter, as the reader computes it.
        log = {
            "startup_info": {"config": {"tokens_per_iter": d, "max_iters": 1}, "model": {"num_params": n}},
            "training_iterations": [{"iter": 0, "tokens": d}],
            "eval_results": [{"iter": 1, "train_loss": loss, "val_loss": loss}],
        }
        with open(os.path.join(out, f"run_{i:02d}.json"), "w") as f:
            json.dump(log, f)
    return runs


def objective(theta, log_n, log_d, log_l):
    a, b, e, alpha, beta = theta
    pred = torch.logsumexp(torch.stack([a - alpha * log_n, b - beta * log_d, e.expand_as(log_n)]), dim=0)
    r = pred - log_l
    return torch.nn.functional.huber_loss(r, torch.zeros_like(r), delta=DELTA, reduction="sum") / DELTA


def oracle_fit(runs):
    log_n = torch.tensor([np.log(r[0]) for r in runs])
    log_d = torch.tensor([np.log(r[1]) for r in runs])
    log_l = torch.tensor([np.log(r[2]) for r in runs])
    best = (float("inf"), None)
    # A coarser grid than approach 3's (every start is a Python-level L-BFGS).
    grid = itertools.product((0.0, 5.0, 10.0, 15.0, 20.0, 25.0), (0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
                             (-1.0, 0.5), (0.5,), (0.5,))
    for a, b, e, alpha, beta in grid:
        theta = torch.tensor([a, b, e, alpha, beta], requires_grad=True)
        opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=500, tolerance_grad=1e-10, tolerance_change=1e-14,
                                history_size=10, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            f = objective(theta, log_n, log_d, log_l)
            f.backward()
            return f

        try:
            opt.step(closure)
        except RuntimeError:
            continue
        with torch.no_grad():
            f = objective(theta, log_n, log_d, log_l).item()
        if np.isfinite(f) and f < best[0]:
            best = (f, theta.detach().clone())
    f, t = best
    a, b, e, alpha, beta = t.tolist()
    return f, dict(E=np.exp(e), A=np.exp(a), B=np.exp(b), alpha=alpha, beta=beta)


def main():
    build = sys.argv[1]
    work = os.path.join(build, "test-scratch", "plan_fit_oracle")
    shutil.rmtree(work, ignore_errors=True)
    runs = write_logs(os.path.join(work, "runs"))
    out = subprocess.run([os.path.join(build, "bin", "llmtrain-plan"), "--fit", os.path.join(work, "runs"),
                          "--bootstrap", "0", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout, out.stderr)
        return 1
    fit = json.loads(out.stdout)["fit"]
    ours, ours_f = fit["law"], fit["objective"]
    oracle_f, oracle = oracle_fit(runs)
    print(f"llmtrain-plan: objective {ours_f:.6g}  " + "  ".join(f"{k}={ours[k]:.5g}" for k in TRUTH))
    print(f"torch oracle : objective {oracle_f:.6g}  " + "  ".join(f"{k}={oracle[k]:.5g}" for k in TRUTH))
    print(f"truth        :                    " + "  ".join(f"{k}={TRUTH[k]:.5g}" for k in TRUTH))
    failures = []
    if ours_f > oracle_f * (1 + 1e-6) + 1e-9:
        failures.append(f"llmtrain-plan's objective {ours_f} is worse than the oracle's {oracle_f}")
    for k in TRUTH:
        if abs(ours[k] / oracle[k] - 1) > 2e-3:
            failures.append(f"{k}: llmtrain-plan {ours[k]:.6g} vs oracle {oracle[k]:.6g}")
    # Both predict the runs (and a larger one) alike.
    for n, d in [(r[0], r[1]) for r in runs] + [(7e10, 1.4e12)]:
        if abs(law(ours, n, d) / law(oracle, n, d) - 1) > 1e-3:
            failures.append(f"prediction at N={n:.3g} D={d:.3g}: {law(ours, n, d):.5f} vs {law(oracle, n, d):.5f}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
