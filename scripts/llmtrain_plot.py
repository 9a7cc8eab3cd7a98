#!/usr/bin/env python3
"""Plots for llmtrain-report: loss, MFU and tokens/s over iterations, scaling curves.

usage: llmtrain_plot.py REPORT_JSON OUT_DIR

REPORT_JSON is written by `llmtrain-report --plot OUT_DIR`; it names the run logs
(docs/run-log.md), whose training_iterations[] are read for the curves.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes
import matplotlib.pyplot as plt  # noqa: E402


def save_atomic(fig, path):
    """The project's rule for every file it writes (core/atomic_file.hpp): a
    temporary name beside it, flushed and fsync'ed, renamed over it, the directory
    fsync'ed; the temporary removed on failure. A reader never sees half a PNG."""
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp.{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            fig.savefig(f, dpi=110, format="png")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def series(log, key):
    xs, ys = [], []
    for rec in log.get("training_iterations", []):
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(rec["iter"])
            ys.append(v)
    return xs, ys


def label_of(run, i):
    return f"[{i}] {run['label']} x{run['world_size']}"


def plot_over_iterations(runs, logs, key, ylabel, title, path, warmup_of):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = 0
    for i, (run, log) in enumerate(zip(runs, logs)):
        xs, ys = series(log, key)
        if not xs:
            continue
        ax.plot(xs, ys, label=label_of(run, i), linewidth=1.2)
        drawn += 1
        w = warmup_of(run)
        if w and key != "loss" and len(xs) > w:
            ax.axvline(xs[w], color="gray", linestyle=":", linewidth=0.8)
    if not drawn:
        ax.text(0.5, 0.5, f"no {key} values in these logs (unknown peak?)", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_atomic(fig, path)
    plt.close(fig)
    return path


def plot_scaling(report, path):
    eff = sorted(report.get("scaling", []), key=lambda e: e["world_size"])
    if len({e["world_size"] for e in eff}) < 2:
        return None
    gpus = [e["world_size"] for e in eff]
    base = eff[0]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    a1.plot(gpus, [e["tokens_per_sec"] for e in eff], "o-", label="measured")
    a1.plot(gpus, [base["tokens_per_sec"] * g / base["world_size"] for g in gpus], "--", color="gray",
            label="linear")
    a1.set_xlabel("GPUs (ranks)")
    a1.set_ylabel("tokens/s")
    a1.set_title("throughput")
    a1.legend()
    a1.grid(True, alpha=0.3)
    for key, name in (("strong_efficiency", "strong"), ("weak_efficiency", "weak")):
        pts = [(e["world_size"], 100.0 * e[key]) for e in eff if isinstance(e.get(key), (int, float))]
        if pts:
            a2.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name)
    a2.axhline(100.0, color="gray", linestyle="--", linewidth=0.8)
    a2.set_xlabel("GPUs (ranks)")
    a2.set_ylabel("efficiency (%)")
    a2.set_title(f"scaling efficiency vs {base['world_size']} GPU(s)")
    a2.set_ylim(bottom=0)
    a2.legend()
    a2.grid(True, alpha=0.3)
    fig.tight_layout()
    save_atomic(fig, path)
    plt.close(fig)
    return path


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        report = json.load(f)
    out = argv[2]
    os.makedirs(out, exist_ok=True)
    runs = report["runs"]
    logs = []
    for r in runs:
        with open(r["path"]) as f:
            logs.append(json.load(f))

    def warmup_of(run):
        return run["summary"].get("warmup_iters_skipped", 0)

    written = [
        plot_over_iterations(runs, logs, "loss", "training loss", "loss", os.path.join(out, "loss.png"), warmup_of),
        plot_over_iterations(runs, logs, "mfu", "MFU (%)", "model FLOPs utilization", os.path.join(out, "mfu.png"),
                             warmup_of),
        plot_over_iterations(runs, logs, "tokens_per_sec", "tokens/s (global)", "throughput",
                             os.path.join(out, "tokens_per_sec.png"), warmup_of),
        plot_scaling(report, os.path.join(out, "scaling.png")),
    ]
    for p in written:
        if p:
            print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
