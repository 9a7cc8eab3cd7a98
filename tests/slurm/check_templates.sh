#!/usr/bin/env bash
# Static checks of the job templates and the Spack files (no Slurm, no Spack needed):
#  - every template the user guide names exists, parses (bash -n), is shellcheck-clean
#    when shellcheck is installed, sources jobs/common.sh and keeps the contract:
#    --output=logs/%x_%j.out, --job-name = file name, and for training jobs
#    --signal=B:USR1@<s>, --requeue, --open-mode=append;
#  - every llmtrain flag the templates and common.sh pass is a key of
#    include/llmtrain/core/config_keys.def (templates drift otherwise), and none
#    asks for a setting Config::refuse_unbuilt refuses as not built yet;
#  - spack.yaml parses and holds the environment the docs promise; spack/repo.yaml
#    parses; spack/spack_repo/llmtrain/packages/llmtrain/package.py compiles and declares the class,
#    variants, dependencies and cmake_args the build needs.
set -uo pipefail
src=${LLMTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$src" || exit 1
errors=0
err() { echo "FAIL: $*" >&2; errors=$((errors + 1)); }

required=(baseline_2gpu scale_8gpu tier1 tier2 tier3 ablation_attention ablation_precision
          ablation_grad_accum ablation_batch_size memory_max_batch memory_tradeoff
          weak_scaling strong_scaling prepare_data scaling_report)
for t in "${required[@]}"; do
  [[ -f jobs/$t.sbatch ]] || err "jobs/$t.sbatch is missing"
done
for f in jobs/common.sh jobs/submit.sh jobs/submit_scaling.sh; do
  [[ -f $f ]] || err "$f is missing"
  bash -n "$f" || err "$f: bash syntax error"
done

for f in jobs/*.sbatch; do
  name=$(basename "$f" .sbatch)
  bash -n "$f" || err "$f: bash syntax error"
  grep -q '^#SBATCH --output=logs/%x_%j.out$' "$f" || err "$f: no '#SBATCH --output=logs/%x_%j.out'"
  grep -q "^#SBATCH --job-name=$name\$" "$f" || err "$f: job name is not '$name'"
  grep -qF "source \"\$_d/common.sh\"" "$f" || err "$f: does not source jobs/common.sh"
  case "$name" in
    prepare_data|scaling_report) ;;
    *)
      grep -Eq '^#SBATCH --signal=B:USR1@[0-9]+$' "$f" || err "$f: no '#SBATCH --signal=B:USR1@<seconds>'"
      grep -q '^#SBATCH --requeue$' "$f" || err "$f: no '#SBATCH --requeue'"
      grep -q '^#SBATCH --open-mode=append$' "$f" || err "$f: no '#SBATCH --open-mode=append'"
      grep -q 'llmtrain_run' "$f" || err "$f: does not run llmtrain through llmtrain_run" ;;
  esac
done

if command -v shellcheck >/dev/null 2>&1; then
  shellcheck -x -s bash jobs/*.sbatch jobs/*.sh scripts/slurm-local.sh tests/slurm/*.sh ||
    err "shellcheck found problems (above)"
else
  echo "note: shellcheck not installed, lint skipped"
fi

# Flags given to llmtrain must be config keys.
python3 - <<'PY' || err "templates pass llmtrain flags that are not config keys (above)"
import glob, re, sys
keys = set(re.findall(r"LLMTRAIN_KEY\(\s*\w+\s*,[^,]+,\s*(\w+)\s*,", open("include/llmtrain/core/config_keys.def").read()))
if len(keys) < 20:
    sys.exit(f"could not read the keys of config_keys.def (found {len(keys)})")
bad = []
files = [f for f in glob.glob("jobs/*.sbatch") if not f.endswith(("prepare_data.sbatch", "scaling_report.sbatch"))]
for f in files + ["jobs/common.sh"]:
    for n, line in enumerate(open(f), 1):
        if line.lstrip().startswith("#"):
            continue
        if f.endswith("common.sh") and "args+=" not in line:
            continue
        if "nvidia-smi" in line:  # its flags, not llmtrain's
            continue
        for k in re.findall(r"--([a-z][a-z0-9_]*)=", line):
            if k not in keys:
                bad.append(f"{f}:{n}: --{k}")
for b in bad:
    print("not a config key:", b)
sys.exit(1 if bad else 0)
PY

# Templates must not ask for what the configuration refuses as not built yet
# (Config::refuse_unbuilt in src/core/config.cpp: each entry names "key=value"):
# jobs/tier3.sbatch once passed use_cuda_graphs=True and failed at start-up.
python3 - <<'PY' || err "templates ask for features this build refuses as not built (above)"
import glob, re, sys
src = open("src/core/config.cpp").read()
body = src[src.index("void Config::refuse_unbuilt()"):]
body = body[:body.index("\n}\n")]
refused = re.findall(r'"([a-z][a-z0-9_]*=[A-Za-z0-9_.]+)"', body)
if not refused:
    print("note: Config::refuse_unbuilt refuses nothing (or its list could not be read)")
bad = []
for f in sorted(glob.glob("jobs/*.sbatch")) + ["jobs/common.sh"]:
    for n, line in enumerate(open(f), 1):
        if line.lstrip().startswith("#"):
            continue
        for setting in refused:
            if re.search(r"--" + re.escape(setting) + r"(\s|$|\")", line):
                bad.append(f"{f}:{n}: --{setting}")
for b in bad:
    print("refused as not built:", b)
sys.exit(1 if bad else 0)
PY

# Spack files.
python3 - <<'PY' || err "Spack files (above)"
import ast, sys
import yaml
problems = []
env = yaml.safe_load(open("spack.yaml"))["spack"]
specs = " | ".join(env.get("specs", []))
for want in ("llmtrain", "+cuda", "cuda_arch=", "openmpi", "hdf5", "+mpi", "boost", "+program_options", "nccl", "py-torch"):
    if want not in specs:
        problems.append(f"spack.yaml: specs lack '{want}' ({specs})")
if env.get("view") is not True:
    problems.append("spack.yaml: view is not true")
if (env.get("concretizer") or {}).get("unify") is not True:
    problems.append("spack.yaml: concretizer:unify is not true")
if "./spack/spack_repo/llmtrain" not in (env.get("repos") or []):
    problems.append("spack.yaml: repos does not list ./spack/spack_repo/llmtrain")
repo = yaml.safe_load(open("spack/spack_repo/llmtrain/repo.yaml"))
if not (repo.get("repo") or {}).get("namespace"):
    problems.append("spack/spack_repo/llmtrain/repo.yaml: no repo:namespace")
path = "spack/spack_repo/llmtrain/packages/llmtrain/package.py"
text = open(path).read()
tree = ast.parse(text, path)
compile(text, path, "exec")
cls = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Llmtrain"]
if not cls:
    problems.append(f"{path}: no class Llmtrain")
else:
    bases = {getattr(b, "id", getattr(b, "attr", "")) for b in cls[0].bases}
    for b in ("CMakePackage", "CudaPackage"):
        if b not in bases:
            problems.append(f"{path}: Llmtrain does not derive from {b}")
    calls = [n for n in ast.walk(cls[0]) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    variants = {c.args[0].value for c in calls if c.func.id == "variant" and c.args}
    deps = " ".join(c.args[0].value for c in calls if c.func.id == "depends_on" and c.args and isinstance(c.args[0], ast.Constant))
    for v in ("tests", "benchmarks"):
        if v not in variants:
            problems.append(f"{path}: no variant '{v}'")
    # The LibTorch minimum is the major.minor of the one pin (python/requirements.txt).
    import re as _re
    pin = _re.search(r"^torch==(\d+)\.(\d+)\.", open("python/requirements.txt").read(), _re.M)
    if not pin:
        problems.append("python/requirements.txt: no torch==X.Y.Z pin")
    else:
        minimum = f"{pin.group(1)}.{pin.group(2)}"
        if f"py-torch@{minimum}:" not in deps:
            problems.append(f"{path}: no depends_on('py-torch@{minimum}:') although python/requirements.txt pins torch {minimum}")
        specs = " ".join(str(x) for x in (env.get("specs") or []))
        if f"py-torch@{minimum}:" not in specs:
            problems.append(f"spack.yaml: the py-torch spec does not ask for @{minimum}: (the pin in python/requirements.txt)")
    # Every dependency the CMake files look for must be a Spack dependency.
    import glob, re
    cmake_to_spack = {
        "Torch": "py-torch", "MPI": "mpi", "HDF5": "hdf5", "Boost": "boost",
        "nlohmann_json": "nlohmann-json", "fmt": "fmt", "PkgConfig": "pkgconfig",
        "libpcre2-8": "pcre2", "icu-uc": "icu4c", "CUDAToolkit": "cuda", "NCCL": "nccl",
        "GTest": "googletest", "benchmark": "benchmark", "Threads": None, "Python3": None,
    }
    cmake_files = ["CMakeLists.txt"] + glob.glob("*/CMakeLists.txt") + glob.glob("*/*/CMakeLists.txt")
    wanted = {"cmake"}
    for f in cmake_files:
        if f.startswith(("build", "third_party")):
            continue
        text_c = open(f).read()
        found = re.findall(r"find_package\(\s*(\w+)", text_c)
        found += re.findall(r"pkg_check_modules\([^)]*?([\w.+-]+)\s*\)", text_c)
        for name in found:
            if name not in cmake_to_spack:
                problems.append(f"{f}: looks for '{name}', which tests/slurm/check_templates.sh cannot map to a Spack package: add it to the map and to package.py")
            elif cmake_to_spack[name]:
                wanted.add(cmake_to_spack[name])
    for d in sorted(wanted):
        if not re.search(r"(^|\s)" + re.escape(d) + r"($|[@+~\s])", deps):
            problems.append(f"{path}: no depends_on('{d}...') although the CMake files need it")
    methods = {n.name for n in cls[0].body if isinstance(n, ast.FunctionDef)}
    if "cmake_args" not in methods:
        problems.append(f"{path}: no cmake_args()")
    for opt in ("LLMTRAIN_BUILD_TESTS", "LLMTRAIN_BUILD_BENCHMARKS", "LLMTRAIN_WITH_CUDA", "Torch_DIR"):
        if opt not in text:
            problems.append(f"{path}: cmake_args does not set {opt}")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PY

if ((errors)); then echo "slurm_templates: $errors problem(s)"; exit 1; fi
echo "slurm_templates: all checks passed"
