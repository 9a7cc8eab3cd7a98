#!/usr/bin/env python3
"""Monitoring a run (docs/monitoring.md), on one real 2-rank run of build/bin/llmtrain
(with tensorboard_dir), checked three ways:

  tensorboard  --tensorboard_dir: TensorBoard's own reader (EventAccumulator) finds
               every scalar of every run-log record, at its iteration, with the run
               log's value, the val loss at each evaluation, and the config as text.
  wandb        scripts/llmtrain_wandb.py in offline mode makes a W&B run from the
               event files (history), the run log's config and its summary.
  html         llmtrain-report --html, for that run alone (with no device peak: the
               MFU figure says why there is none) and for a scaling study of it
               with three more real runs (1 and 2 ranks; strong and weak pairs):
               headless Chromium at a 1280 px window finds every figure (by id,
               titled with units), the headline, a page no wider than 1280 px,
               nothing on its console (a control page's console error is seen, so
               the check can fail), and a screenshot that is not blank.
               LLMTRAIN_DOC_SCREENSHOTS=DIR copies the two screenshots there
               (docs/images/ of docs/monitoring.md).

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


def chromium_cmd(width, height, *args):
    return [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--window-size={width},{height}", f"--user-data-dir={os.path.join(work, 'chromium-profile')}", *args]


def render(page, png, width=1280, height=1500):
    """Headless Chromium's screenshot of `page`; returns the console lines it logged."""
    cmd = chromium_cmd(width, height, f"--screenshot={png}", "--enable-logging=stderr", "--v=0", "file://" + page)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if p.returncode != 0 or not os.path.exists(png):
        fail(f"chromium exited {p.returncode}:\n{p.stderr[-3000:]}")
    return [line for line in p.stderr.splitlines() if ":CONSOLE" in line]


# Run in a copy of the page (the page itself has no script): what the browser laid out.
PROBE = """<script>
(function () {
  var out = {innerWidth: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
             scrollHeight: document.documentElement.scrollHeight, figures: {},
             headlines: document.querySelectorAll("#headline .headline").length, wide: []};
  document.querySelectorAll("figure").forEach(function (f) {
    var svg = f.querySelector("svg"), t = svg && svg.querySelector("title"), r = f.getBoundingClientRect();
    out.figures[f.id] = {title: t ? t.textContent : null, text: svg ? svg.textContent : "",
                         width: r.width, height: r.height};
  });
  document.querySelectorAll("body *").forEach(function (e) {
    var r = e.getBoundingClientRect();
    if (r.right > window.innerWidth + 0.5 && !e.closest(".scroll")) out.wide.push(e.tagName + "#" + e.id);
  });
  var pre = document.createElement("pre");
  pre.id = "llmtrain-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def probe(page, width=1280):
    """What Chromium lays out for `page` in a `width` px window: figure ids and titles, widths."""
    copy = page[:-5] + ".probe.html"
    with open(page) as f:
        html = f.read()
    with open(copy, "w") as f:
        f.write(html.replace("</body>", PROBE + "</body>"))
    p = subprocess.run(chromium_cmd(width, 900, "--dump-dom", "file://" + copy), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    start = p.stdout.find('<pre id="llmtrain-probe">')
    if p.returncode != 0 or start < 0:
        fail(f"chromium --dump-dom of {copy} exited {p.returncode} without the probe's output:\n{p.stderr[-3000:]}")
    text = p.stdout[start + len('<pre id="llmtrain-probe">'):p.stdout.index("</pre>", start)]
    return json.loads(text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


# The figures of issue 52 (docs/monitoring.md), by the ids report_figures() gives them.
PER_RUN = ["fig-loss", "fig-lr", "fig-grad-norm", "fig-tokens-per-sec", "fig-mfu", "fig-memory"]
SIDE_BY_SIDE = ["fig-compare-tokens-per-sec", "fig-compare-mfu", "fig-scaling-efficiency", "fig-scaling-throughput"]


def check_page(name, page, n_runs, want, texts):
    """Every wanted figure titled with units, the headline, the width, no console, not blank."""
    from PIL import Image
    got = probe(page)
    if got["innerWidth"] != 1280:
        fail(f"{name}: the window is {got['innerWidth']} px wide, not 1280 (chromium ignored --window-size?)")
    if got["scrollWidth"] > 1280 or got["wide"]:
        fail(f"{name}: the page is {got['scrollWidth']} px wide at 1280 px; past the edge: {got['wide'][:10]}")
    if got["headlines"] != n_runs:
        fail(f"{name}: {got['headlines']} headlines for {n_runs} runs")
    for fid in want:
        fig = got["figures"].get(fid)
        if not fig:
            fail(f"{name}: no figure {fid}; the page has {sorted(got['figures'])}")
        if not fig["title"] or "(" not in fig["title"] or fig["height"] < 100 or fig["width"] < 400:
            fail(f"{name}: figure {fid} is untitled, without units or too small: {fig['title']!r} "
                 f"{fig['width']:.0f}x{fig['height']:.0f}")
    for fid, words in texts.items():
        for w in words:
            if w not in got["figures"][fid]["text"]:
                fail(f"{name}: figure {fid} does not say {w!r}: {got['figures'][fid]['text'][:400]!r}")
    png = os.path.join(work, f"{name}.png")
    console = render(page, png, 1280, got["scrollHeight"])
    if console:
        fail(f"{name}: the page logged to the console:\n" + "\n".join(console))
    img = Image.open(png).convert("RGB")
    raw = img.tobytes()
    pixels = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
    ink = sum(1 for px in pixels if px != (255, 255, 255)) / len(pixels)
    blue = sum(1 for r, g, b in pixels if abs(r - 0x1f) < 40 and abs(g - 0x77) < 40 and abs(b - 0xb4) < 40)
    if ink < 0.01 or blue < 50:
        fail(f"{name}: the screenshot looks blank: {ink:.1%} non-white pixels, {blue} pixels of the plots' blue")
    if os.environ.get("LLMTRAIN_DOC_SCREENSHOTS"):
        shutil.copy(png, os.path.join(os.environ["LLMTRAIN_DOC_SCREENSHOTS"], f"{name}.png"))
    print(f"html {name}: {len(want)} figures found, {got['scrollWidth']} px wide at a 1280 px window, "
          f"{img.size[0]}x{img.size[1]} screenshot ({ink:.1%} non-white), no console messages")


def study_runs(data):
    """Three more short real runs: with the 2-rank run above, a study at 1 and 2 ranks. Strong: 1 rank x 2
    micro-batches against 2 ranks x 1 (same tokens/iter); weak: 1 rank x 1 against 2 ranks x 1, and 1 x 2
    against 2 x 2 (same tokens/iter per rank). No peak_tflops: these have no MFU."""
    short = ["--max_iters=8", "--eval_interval=4", "--eval_iters=2", "--log_interval=4"]
    for out, ranks, accum in (("ws1_accum1", 1, 1), ("ws1_accum2", 1, 2), ("ws2_accum2", 2, 2)):
        e.train(ranks, data, out, *short, f"--gradient_accumulation_steps={accum}")
    return [e.run_logs(out)[-1] for out in ("ws1_accum1", "ws1_accum2", "ws2_accum2")]


def check_html(log, tb, run_log):
    try:
        from PIL import Image  # noqa: F401
    except ImportError as x:
        skip(f"Pillow is not importable ({x}); tensorboard brings it (scripts/python-env.sh)")
    chromium()
    control = os.path.join(work, "control.html")
    with open(control, "w") as f:
        f.write('<!DOCTYPE html><html><body><p>x</p><script>console.error("llmtrain-control")</script></body></html>')
    if not any("llmtrain-control" in line for line in render(control, os.path.join(work, "control.png"))):
        fail("chromium's console output is not seen (the control page's console.error is missing)")
    study = study_runs(os.path.join(work, "data"))
    report = os.path.join(e.bin_dir, "llmtrain-report")
    # One run: the 2-rank run without a device peak, as on any CPU.
    one = os.path.join(work, "report-one-run.html")
    e.run([report, study[2], "--html", one])
    check_page("report-one-run", one, 1, ["fig-phases-0"] + PER_RUN,
               {"fig-mfu": ["No MFU: MFU needs the device's dense peak"],
                "fig-phases-0": ["measured", "predicted", "Largest miss: "],
                "fig-loss": ["train (each iteration)", "val (each evaluation)"],
                "fig-memory": ["allocated peak (measured)", "memory plan"]})
    # A set of runs: the study (1 and 2 ranks) with the tensorboard run, which has an MFU (peak_tflops=1).
    many = os.path.join(work, "report-runs.html")
    p = e.run([report, run_log, *study, "--html", many])
    check_page("report-runs", many, 4, [f"fig-phases-{i}" for i in range(4)] + PER_RUN + SIDE_BY_SIDE,
               {"fig-scaling-efficiency": ["strong, ", "weak, "], "fig-compare-mfu": ["n/a"],
                "fig-compare-tokens-per-sec": ["[3] "]})
    # --plot writes the same figures as files.
    plots = os.path.join(work, "plots")
    e.run([report, run_log, *study, "--plot", plots])
    with open(many) as f:
        page = f.read()
    for fid in [f"phases-{i}" for i in range(4)] + [x[4:] for x in PER_RUN + SIDE_BY_SIDE]:
        with open(os.path.join(plots, fid + ".svg")) as f:
            svg = f.read()
        if svg[svg.index("<svg"):] not in page:
            fail(f"--plot's {fid}.svg is not the page's figure")
    print(f"html: --plot wrote the page's {len(os.listdir(plots))} figures as SVG files")


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
