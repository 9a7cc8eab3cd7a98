#!/usr/bin/env python3
"""Monitoring a run (docs/monitoring.md), on one real 2-rank run of build/bin/llmtrain
(with tensorboard_dir), checked three ways:

  tensorboard  --tensorboard_dir: TensorBoard's own reader (EventAccumulator) finds
               every scalar of every run-log record, at its iteration, with the run
               log's value, the val loss at each evaluation, and the config as text.
  wandb        scripts/llmtrain_wandb.py in offline mode makes a W&B run from the
               event files (history), the run log's config and its summary.
  html         llmtrain-report --html: headless Chromium renders the page (the
               screenshot is not blank and shows the plots' colours) and logs nothing
               to its console; a control page's console error is seen, so the check
               can fail.

Runs under the project's Python (LLMTRAIN_PYTHON: tensorboard, wandb, Pillow).
A check whose tool is missing says SKIP and the others run; exit 77 if all skip.
Usage: test_monitoring.py BUILD_DIR SOURCE_DIR MPIEXEC [CHECK...]   (default: all three)
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as e  # noqa: E402

work = e.setup(sys.argv, "monitoring")

# Run-log key -> TensorBoard tag (src/record/tensorboard.cpp's table, as users see it).
ITERATION_TAGS = {
    "loss": "loss/train", "lr": "optim/lr", "grad_norm": "optim/grad_norm",
    "tokens_per_sec": "perf/tokens_per_sec", "mfu": "perf/mfu_percent", "achieved_tflops": "perf/achieved_tflops",
    "dt_ms": "step_time/total_ms", "data_ms": "step_time/data_ms",
    "forward_backward_ms": "step_time/forward_backward_ms", "communication_ms": "step_time/communication_ms",
    "optimizer_ms": "step_time/optimizer_ms", "other_ms": "step_time/other_ms",
    "memory_peak_gb": "memory/peak_gb", "memory_allocated_gb": "memory/allocated_gb",
}


class Skip(Exception):
    pass


def skip(why):
    raise Skip(why)


def fail(why):
    sys.exit(f"FAILED: {why}")


def train_with_tensorboard():
    data = e.prepare(n_files=4)
    _, log = e.train(2, data, "out", "--max_iters=8", "--eval_interval=4", "--eval_iters=2", "--log_interval=1",
                     "--peak_tflops=1", "--tensorboard_dir=tb")
    return log, os.path.join(work, "tb"), e.run_logs("out")[-1]


def f32_close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))  # simple_value is a float


def check_tensorboard(log, tb, run_log):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as x:
        skip(f"tensorboard is not importable ({x}); scripts/python-env.sh installs it")
    files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
    if len(files) != 1:
        fail(f"expected one event file in {tb} (rank 0 only), found {files}")
    acc = EventAccumulator(tb, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    iters = log["training_iterations"]
    n = 0
    for key, tag in ITERATION_TAGS.items():
        if tag not in tags["scalars"]:
            fail(f"tag {tag} missing; scalars: {sorted(tags['scalars'])}")
        got = {ev.step: ev.value for ev in acc.Scalars(tag)}
        for rec in iters:
            if key in rec:
                if rec["iter"] not in got or not f32_close(got[rec["iter"]], rec[key]):
                    fail(f"{tag} at step {rec['iter']}: {got.get(rec['iter'])}, run log {key} = {rec[key]}")
                n += 1
    vals = {ev.step: ev.value for ev in acc.Scalars("loss/val")}
    for ev in log["eval_results"]:
        if not f32_close(vals.get(ev["iter"], math.nan), ev["val_loss"]):
            fail(f"loss/val at {ev['iter']}: {vals.get(ev['iter'])}, run log {ev['val_loss']}")
    if "config" not in tags["tensors"]:
        fail(f"no config text; tensors: {tags['tensors']}")
    if acc.SummaryMetadata("config").plugin_data.plugin_name != "text":
        fail("the config is not a text-plugin summary")
    text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
    config = json.loads("\n".join(line[4:] for line in text.split("\n")))
    if config != log["startup_info"]["config"]:
        fail("the config text differs from the run log's startup_info.config")
    if config.get("tensorboard_dir") != "tb":
        fail(f"config.tensorboard_dir = {config.get('tensorboard_dir')!r}")
    print(f"tensorboard: {n} scalars of {len(iters)} iterations, {len(vals)} val losses and the config "
          f"read back with EventAccumulator from {files[0]}")


def wandb_records(path):
    """The records of a .wandb file, read here: ':W&B' + magic + version (7 bytes), then
    LevelDB-log records (32 KiB blocks; 7-byte header: CRC, length, type FULL/FIRST/MIDDLE/LAST)
    each holding a wandb_internal.Record protobuf."""
    from wandb.proto import wandb_internal_pb2 as pb
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        fail(f"{path} is not a .wandb file")
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if left < 7 or (length == 0 and kind == 0):
            pos += left  # block trailer / padding
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            r = pb.Record()
            r.ParseFromString(buf)
            yield r
            buf = b""


def check_wandb(log, tb, run_log):
    try:
        import wandb  # noqa: F401
    except ImportError as x:
        skip(f"wandb is not importable ({x}); scripts/python-env.sh installs it")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_DIR=work, WANDB_SILENT="true")
    script = os.path.join(e.source, "scripts", "llmtrain_wandb.py")
    p = subprocess.run([sys.executable, script, run_log, "--tensorboard_dir", tb, "--project", "llmtrain-test"],
                       cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    print(p.stdout)
    if p.returncode != 0:
        fail(f"llmtrain_wandb.py exited {p.returncode}")
    runs = glob.glob(os.path.join(work, "wandb", "offline-run-*", "run-*.wandb"))
    if len(runs) != 1:
        fail(f"expected one offline run file, found {runs}")
    config, summary, losses = {}, {}, {}
    for r in wandb_records(runs[0]):
        kind = r.WhichOneof("record_type")
        if kind in ("run", "config"):  # the run record holds the config given to wandb.init
            updates = r.run.config.update if kind == "run" else r.config.update
            config.update({u.key: json.loads(u.value_json) for u in updates})
        elif kind == "summary":
            summary.update({(u.key or "/".join(u.nested_key)): json.loads(u.value_json) for u in r.summary.update})
        elif kind == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
            if "loss/train" in items:
                losses[items["_step"]] = items["loss/train"]
    if config.get("block_size") != log["startup_info"]["config"]["block_size"]:
        fail(f"the run's config lacks the run log's block_size: {sorted(config)[:20]}")
    if not f32_close(summary.get("tokens_per_sec", math.nan), log["summary"]["tokens_per_sec"]):
        fail(f"the run's summary lacks the run log's tokens_per_sec: {summary}")
    want = {rec["iter"]: rec["loss"] for rec in log["training_iterations"] if "loss" in rec}
    if set(losses) != set(want) or not all(f32_close(losses[k], want[k]) for k in want):
        fail(f"history loss/train {losses} differs from the run log's {want}")
    print(f"wandb: offline run {runs[0]} holds the config, the summary and {len(losses)} loss points")


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    skip("no chromium (Debian: apt-get install chromium; scripts/install-deps.sh lists it)")


def render(page, png):
    """Headless Chromium's screenshot of `page`; returns the console lines it logged."""
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1000,1500",
           f"--user-data-dir={os.path.join(work, 'chromium-profile')}", f"--screenshot={png}",
           "--enable-logging=stderr", "--v=0", "file://" + page]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if p.returncode != 0 or not os.path.exists(png):
        fail(f"chromium exited {p.returncode}:\n{p.stderr[-3000:]}")
    return [line for line in p.stderr.splitlines() if ":CONSOLE" in line]


def check_html(log, tb, run_log):
    try:
        from PIL import Image
    except ImportError as x:
        skip(f"Pillow is not importable ({x}); tensorboard brings it (scripts/python-env.sh)")
    chromium()
    page = os.path.join(work, "report.html")
    e.run([os.path.join(e.bin_dir, "llmtrain-report"), run_log, "--html", page])
    control = os.path.join(work, "control.html")
    with open(control, "w") as f:
        f.write('<!DOCTYPE html><html><body><p>x</p><script>console.error("llmtrain-control")</script></body></html>')
    if not any("llmtrain-control" in line for line in render(control, os.path.join(work, "control.png"))):
        fail("chromium's console output is not seen (the control page's console.error is missing)")
    console = render(page, os.path.join(work, "report.png"))
    if console:
        fail("the page logged to the console:\n" + "\n".join(console))
    img = Image.open(os.path.join(work, "report.png")).convert("RGB")
    raw = img.tobytes()
    pixels = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
    ink = sum(1 for px in pixels if px != (255, 255, 255)) / len(pixels)
    blue = sum(1 for r, g, b in pixels if abs(r - 0x1f) < 40 and abs(g - 0x77) < 40 and abs(b - 0xb4) < 40)
    if ink < 0.01 or blue < 50:
        fail(f"the screenshot looks blank: {ink:.1%} non-white pixels, {blue} pixels of the plots' blue")
    print(f"html: {page} rendered {img.size[0]}x{img.size[1]}, {ink:.1%} non-white, {blue} plot-blue pixels, "
          f"no console messages")


CHECKS = {"tensorboard": check_tensorboard, "wandb": check_wandb, "html": check_html}
run = train_with_tensorboard()
skipped = []
for name in sys.argv[4:] or CHECKS:
    try:
        CHECKS[name](*run)
    except Skip as why:
        print(f"SKIP {name}: {why}")
        skipped.append(name)
if len(skipped) == len(sys.argv[4:] or CHECKS):
    sys.exit(77)
print("PASSED" + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
