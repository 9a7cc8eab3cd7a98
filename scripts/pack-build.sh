#!/usr/bin/env bash
# pack-build.sh BUILD_DIR [ARCHIVE]
# Packs a CUDA build made on a machine without a GPU into one archive (at most
# 48 MiB) that runs on a GPU machine without a compiler: scripts/gpu-check.sh
# takes the archive in place of a build directory (docs/gpu.md).
#
# In the archive (llmtrain-build/):
#   build/     from the build tree only what runs: bin/, every test program
#              and benchmark, the CTestTestfile.cmake files (no objects, static
#              libraries, precompiled headers, nor the tests' own output).
#              Programs are stripped.
#   lib/       what those programs load that is neither the GPU image's torch
#              (torch/lib, the nvidia-* wheels beside it) nor a library of the
#              GPU kit (../shared/gpu-kit/deps.tar.xz: MPI, HDF5, Boost, ICU,
#              PCRE2, ...) nor one every Ubuntu 24.04 image has
#              (scripts/gpu-image-libs.txt: glibc, GCC 13's runtime, zlib, ...),
#              and what those load in turn (scripts/packed-libs.py): today Arrow
#              and Parquet from the pyarrow wheel and Google Benchmark's
#              libbenchmark.so.1debian. What the kit's and torch's libraries
#              load is theirs (a Debian 12 copy of the image's GnuTLS or
#              Kerberos first on LD_LIBRARY_PATH would shadow the image's).
#              Before the archive is written every program's libraries are
#              checked against that list, lib/, the wheels and the kit, by
#              reading the files (packed-libs.py check): one that would not
#              load on the GPU image fails the pack.
#   MANIFEST   torch, CUDA, NCCL and cuDNN versions the build linked, the
#              commit, the build and source paths to rewrite (unpack-build.sh).
# ARCHIVE: default llmtrain-build-<commit>.tar.xz in the current directory.
# LLMTRAIN_GPU_KIT: the kit whose libraries are left out (default ../shared/gpu-kit).
set -euo pipefail
B=$(cd "${1:?usage: pack-build.sh BUILD_DIR [ARCHIVE]}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$SRC" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
OUTF=${2:-$PWD/llmtrain-build-$commit.tar.xz}
KIT=${LLMTRAIN_GPU_KIT:-$SRC/../shared/gpu-kit}
LIMIT=$((48 * 1024 * 1024))
[[ -x "$B/bin/llmtrain" ]] || { echo "pack-build: $B/bin/llmtrain missing: build first" >&2; exit 1; }
grep -q '^LLMTRAIN_WITH_CUDA:BOOL=ON' "$B/CMakeCache.txt" || { echo "pack-build: $B is not a CUDA build (LLMTRAIN_WITH_CUDA=ON)" >&2; exit 1; }
py=$(sed -n 's/^LLMTRAIN_PYTHON:FILEPATH=//p' "$B/CMakeCache.txt")
srcdir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$B/CMakeCache.txt")
t0=$SECONDS

stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
P=$stage/llmtrain-build
mkdir -p "$P/build" "$P/lib"

# 1. From the build tree, only what runs: the ELF programs (bin/, the test
#    programs, the benchmarks) and what CTest reads (CTestTestfile.cmake), and
#    CMakeCache.txt for the record; not objects, static libraries, precompiled
#    headers, nor what the tests left there (test-scratch/, Testing/).
( cd "$B" && find . -type f ! -path '*/CMakeFiles/*' ! -path './Testing/*' ! -path './test-scratch/*' \
    ! -name '*.o' ! -name '*.a' \( -name CTestTestfile.cmake -o -name CMakeCache.txt -o -perm -u+x \) -print0 |
  xargs -0 cp --parents -t "$P/build" )
# The programs: stripped (no debug information in a Release build; the dynamic
# symbols stay, dladdr and backtraces by exported name still work).
mapfile -t progs < <(cd "$P/build" && find . -type f -perm -u+x -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
for p in "${progs[@]}"; do strip --strip-unneeded "$P/build/$p" 2>/dev/null || true; done

# 2. What the programs load (scripts/packed-libs.py): every library they need,
#    and what those need, that is neither the image's (scripts/gpu-image-libs.txt:
#    glibc, GCC 13's runtime, Ubuntu 24.04's required libraries), nor in the
#    image's torch or nvidia wheels, nor the kit's. Found here by ldd, whatever
#    directory it is in (Debian's libbenchmark.so.1debian under /usr/lib as much as
#    pyarrow's Arrow). Then the stage is checked as the GPU image will load it.
torch_lib=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
site=$(dirname "$torch_lib")
kit=()
if [[ -f "$KIT/deps.tar.xz" ]]; then kit=(--kit "$KIT/deps.tar.xz")
else echo "pack-build: no GPU kit at $KIT: its libraries (MPI, HDF5, ...) are packed too" >&2; fi
plan=$("$py" "$SRC/scripts/packed-libs.py" plan --site "$site" "${kit[@]+"${kit[@]}"}" \
  "${progs[@]/#/$B/}")
while read -r name path; do [[ -n "$name" ]] && cp -L "$path" "$P/lib/$name"; done <<<"$plan"
"$py" "$SRC/scripts/packed-libs.py" check --site "$site" "${kit[@]+"${kit[@]}"}" "$P" ||
  { echo "pack-build: a packed program would not find a library on the GPU image (above)" >&2; exit 1; }

# 3. The manifest: what the build linked, to be matched on the GPU machine.
"$py" - "$B" "$srcdir" "$commit" "$B/CMakeCache.txt" >"$P/MANIFEST" <<'PY'
import re, sys, torch
b, src, commit, cache = sys.argv[1:5]
c = dict(re.findall(r"^([A-Za-z_0-9]+):[A-Z]+=(.*)$", open(cache).read(), re.M))
nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else ""
print(f"torch={torch.__version__.split('+')[0]}")
print(f"torch_build={torch.__version__}")
print(f"cuda={torch.version.cuda or ''}")
print(f"cudnn={torch.backends.cudnn.version() or ''}")
print(f"nccl={nccl}")
print(f"commit={commit}")
print(f"build_dir={b}")
print(f"source_dir={src}")
print(f"python={c.get('LLMTRAIN_PYTHON', '')}")          # the tests' oracles: the image's python there
print(f"venv={sys.prefix}")
print(f"python3={c.get('_Python3_EXECUTABLE', '')}")
print(f"mpiexec={c.get('MPIEXEC_EXECUTABLE', '')}")
PY
echo "packed_libs=$(find "$P/lib" -type f -printf '%f ' | sort)" >>"$P/MANIFEST"

# 4. One archive: similar programs next to each other (xz's 64 MiB window finds
#    the library code every test program carries).
( cd "$stage" && find llmtrain-build -type f -printf '%s %p\n' | sort -n | cut -d' ' -f2- >list &&
  tar --owner=0 --group=0 -cf - -T list | xz -9 -T1 >"$OUTF" )
size=$(stat -c %s "$OUTF")
printf 'pack-build: %s: %d files, %.1f MiB (limit 48 MiB), in %d s; %s\n' "$OUTF" "$(wc -l <"$stage/list")" \
  "$(echo "$size / 1048576" | bc -l)" $((SECONDS - t0)) "$(grep -E '^(torch|cuda|packed_libs)=' "$P/MANIFEST" | tr '\n' ' ')"
((size <= LIMIT)) || { echo "pack-build: $OUTF is over 48 MiB" >&2; exit 1; }
