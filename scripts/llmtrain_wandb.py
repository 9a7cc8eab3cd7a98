#!/usr/bin/env python3
"""llmtrain_wandb.py RUN_LOG --tensorboard_dir DIR [--project P] [--entity E] [--name N] [--check]

Makes a Weights & Biases run from one llmtrain run (docs/monitoring.md): the
history from the TensorBoard event files in DIR (every scalar at its iteration,
read with TensorBoard's own reader), the config from the run log's
startup_info.config and the summary from its summary. It runs after (or beside)
training; nothing of W&B runs in the training process.

Online (after `wandb login`) the run is uploaded at once; with WANDB_MODE=offline
it is written under ./wandb/offline-run-*, and `wandb sync ./wandb/offline-run-*`
uploads it later (from a login node, say). --check prints, as the last line, a
JSON of what was logged: {"config": ..., "summary": ..., "history": {tag: points}}.
(`wandb sync --sync-tensorboard DIR` did this before wandb 0.30, which removed it.)
"""
import argparse
import collections
import json
import os
import sys


def scalars(tb_dir):
    """{step: {tag: value}} of every scalar in the event files of tb_dir."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    by_step = collections.defaultdict(dict)
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            by_step[ev.step][tag] = ev.value
    return by_step


def numbers(d):
    return {k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("run_log")
    ap.add_argument("--tensorboard_dir", required=True, help="the run's tensorboard_dir")
    ap.add_argument("--project", default="llmtrain")
    ap.add_argument("--entity", default=None)
    ap.add_argument("--name", default=None, help="the run's name (default: the run log's file name)")
    ap.add_argument("--check", action="store_true", help="print what was logged as JSON")
    a = ap.parse_args()
    with open(a.run_log) as f:
        log = json.load(f)
    history = scalars(a.tensorboard_dir)
    if not history:
        sys.exit(f"llmtrain_wandb: no scalars in the event files of '{a.tensorboard_dir}' (tensorboard_dir of the run?)")
    import wandb
    name = a.name or os.path.splitext(os.path.basename(a.run_log))[0]
    run = wandb.init(project=a.project, entity=a.entity, name=name, config=log["startup_info"].get("config", {}),
                     job_type="train")
    counts = collections.Counter()
    for step in sorted(history):
        run.log(history[step], step=step)
        counts.update(history[step].keys())
    run.summary.update(numbers(log.get("summary", {})))
    check = {"config": dict(run.config), "summary": numbers(log.get("summary", {})), "history": dict(counts)}
    run.finish()
    print(f"llmtrain_wandb: {len(history)} steps, {sum(counts.values())} scalars, the config and the summary of "
          f"{a.run_log} in W&B run '{name}'")
    if a.check:
        print(json.dumps(check))


if __name__ == "__main__":
    main()
