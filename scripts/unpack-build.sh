#!/usr/bin/env bash
# unpack-build.sh ARCHIVE DIR
# Unpacks an archive of scripts/pack-build.sh into DIR (DIR/llmtrain-build) for
# this machine, with no compiler: the build and source paths, the Python
# interpreter and mpiexec recorded in the test files (CTestTestfile.cmake, ...)
# become this checkout's, this machine's python (LLMTRAIN_PYTHON or python3, the
# one whose torch the programs load) and this PATH's mpiexec; DIR/llmtrain-build/env.sh
# sets LD_LIBRARY_PATH to the archive's lib/, that python's torch/lib and the
# nvidia-* wheels beside it (the programs' DT_RPATH names the build machine's).
# Where the build's own paths (compiled into the test programs) are free on this
# machine they are made links to this checkout and the unpacked build.
# Refuses, in one line, a python whose torch or CUDA version is not the one the
# archive was built against. Prints the build directory's path last.
set -euo pipefail
A=$(readlink -f "${1:?usage: unpack-build.sh ARCHIVE DIR}")
D=${2:?usage: unpack-build.sh ARCHIVE DIR}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=${LLMTRAIN_PYTHON:-python3}
PY=$(command -v "$PY")
mkdir -p "$D"; D=$(cd "$D" && pwd)
rm -rf "$D/llmtrain-build"
tar -C "$D" -xJf "$A"
P=$D/llmtrain-build
m() { sed -n "s/^$1=//p" "$P/MANIFEST"; }
IFS='|' read -r torch_found cuda_found site prefix < <("$PY" -c 'import os, sys, torch
print(torch.__version__.split("+")[0], torch.version.cuda or "none", os.path.dirname(os.path.dirname(torch.__file__)), sys.prefix, sep="|")' 2>/dev/null || echo "none|none||")
if [[ "$torch_found" != "$(m torch)" || "$cuda_found" != "$(m cuda)" ]]; then
  echo "unpack-build: $PY has torch $torch_found (CUDA $cuda_found); the archive was built against torch $(m torch) (CUDA $(m cuda)): refused" >&2
  exit 1
fi
mpiexec=$(command -v mpiexec || command -v mpirun || m mpiexec)
# The test programs hold the build and source paths compiled in
# (LLMTRAIN_TEST_BUILD_DIR, ..._SOURCE_DIR): where those paths are free here,
# they become links to this checkout and to the unpacked build.
src0=$(m source_dir) b0=$(m build_dir)
if [[ ! -e "$src0" && ! -L "$src0" ]]; then mkdir -p "$(dirname "$src0")" && ln -s "$SRC" "$src0"; fi
# (A build directory inside the source directory now resolves through that link.)
if [[ ! -e "$b0" && ! -L "$b0" ]]; then mkdir -p "$(dirname "$b0")" && ln -s "$P/build" "$b0"; fi
# Longest paths first: the build directory lies inside the source directory.
# (The python paths before the venv's, which holds one of them.)
subst=(-e "s#$(m build_dir)#$P/build#g" -e "s#$(m source_dir)#$SRC#g")
for k in python python3; do [[ -n "$(m $k)" ]] && subst+=(-e "s#$(m $k)#$PY#g"); done
subst+=(-e "s#$(m venv)#$prefix#g")
[[ -n "$(m mpiexec)" ]] && subst+=(-e "s#$(m mpiexec)#$mpiexec#g")
mapfile -t files < <(grep -rIl -e "$(m build_dir)" -e "$(m source_dir)" -e "$(m venv)" -e "$(m mpiexec)" "$P/build" || true)
for f in "${files[@]}"; do sed -i "${subst[@]}" "$f"; done
nv=$(find "$site/nvidia" -maxdepth 3 -type d -name lib 2>/dev/null | tr '\n' ':')
cat >"$P/env.sh" <<ENV
# source me: the libraries of $P/build's programs on this machine
export LD_LIBRARY_PATH=$P/lib:$site/torch/lib:${nv}\${LD_LIBRARY_PATH:-}
export LLMTRAIN_PYTHON=$PY
ENV
echo "$P/build"
