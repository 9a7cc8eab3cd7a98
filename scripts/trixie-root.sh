#!/usr/bin/env bash
# trixie-root.sh [--print | --bare | run CMD...]
# A Debian 13 (trixie) root with GCC 14 (and GCC 13), CMake, Ninja and the
# Debian packages of scripts/install-deps.sh, for building llmtrain with the
# compilers users have (Ubuntu 24.04's GCC 13, Debian 13's GCC 14, a cluster's
# GCC 13/14 module) on a Debian 12 machine. Made once with mmdebstrap from
# Debian's registry (about 4 minutes and 1.1 GB here, 2 cores); later calls
# reuse it (a stamp of the package list says when it is current).
#
#   LLMTRAIN_TRIXIE_ROOT   where the root lives (default /var/tmp/llmtrain-trixie)
#   LLMTRAIN_TRIXIE_MIRROR the Debian mirror (default http://deb.debian.org/debian)
#
# run CMD...: runs CMD inside the root (chroot in a private mount namespace, as
# root) in this clone's directory, with bound in: the clone, the ccache
# directory, the project's venv (~/.cache/llmtrain/venv or LLMTRAIN_VENV) and
# the interpreter it was made from (its pyvenv.cfg `home`), so the same pinned
# torch wheel's LibTorch is linked without downloading it again, and
# /usr/local/cuda when it exists. The venv's Python is the host's (3.11); it
# runs on trixie's newer glibc.
# --bare: a second root, Debian 12 (bookworm) with no compiler (LLMTRAIN_TRIXIE_ROOT's
# path with -bare; about 1 minute, 250 MB), for checking that a packed build
# (scripts/pack-build.sh) runs where nothing can be built, as on a GPU image: its
# libraries come from the GPU kit (../shared/gpu-kit) as they do there.
# --print: print the root's path and exit.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=${LLMTRAIN_TRIXIE_ROOT:-/var/tmp/llmtrain-trixie}
mirror=${LLMTRAIN_TRIXIE_MIRROR:-http://deb.debian.org/debian}
bare=0
if [[ "${1:-}" == --bare ]]; then bare=1; root=$root-bare; shift; fi
if [[ "${1:-}" == --print ]]; then echo "$root"; exit 0; fi

# What install-deps.sh installs on Debian 12, under trixie's names, less what
# the checks here do not use (chromium, Slurm, npm: their tests skip; the npm
# packages come from the clone's third_party/npm), plus the compilers and ccache.
PKGS=(
  build-essential g++-14 g++-13 cmake ninja-build pkg-config git ca-certificates ccache
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev
  libboost-program-options-dev nlohmann-json3-dev libpcre2-dev libicu-dev
  libzstd-dev zlib1g-dev liblzma-dev
  libgtest-dev libgmock-dev libbenchmark-dev python3-yaml zstd file binutils
  mount  # prepare_faults_full_disk mounts a 1 MiB tmpfs (apt's variant has no mount)
  nodejs # the tokenizer parity tests' oracle (the JS tokenizers of third_party/npm)
  e2fsprogs # ckpt_disk_full's 2 MB ext4 image (mkfs.ext4)
)
# The bare root: CTest and xz (a GPU image has both), nothing that compiles.
BARE=(cmake xz-utils ca-certificates)
suite=trixie variant=apt
((bare)) && PKGS=("${BARE[@]}") suite=bookworm variant=minbase
stamp=$root/.llmtrain-root
want=$(printf '%s\n' $suite "${PKGS[@]}" | sha256sum | cut -c1-16)

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "trixie-root: making the root needs root (mmdebstrap's root mode)" >&2; exit 1; }
  # A clean machine (CI) has no mmdebstrap: Debian 12 ships it.
  if ! command -v mmdebstrap >/dev/null; then
    echo "trixie-root: installing mmdebstrap (Debian's package)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; } ||
      { echo "trixie-root: needs mmdebstrap, and apt-get install mmdebstrap failed" >&2; exit 1; }
  fi
  echo "trixie-root: making $root ($suite, ${#PKGS[@]} packages)"
  t0=$SECONDS
  rm -rf "$root"
  mkdir -p "$(dirname "$root")"
  mmdebstrap --variant=$variant --quiet --include="$(IFS=,; echo "${PKGS[*]}")" $suite "$root" "$mirror"
  echo "$want" >"$stamp"
  echo "trixie-root: made in $((SECONDS - t0)) s ($(du -sh "$root" | cut -f1))"
fi
[[ "${1:-}" == run ]] || { echo "trixie-root: $root is ready"; exit 0; }
shift
(($#)) || { echo "trixie-root: run needs a command" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "trixie-root: run needs root (a mount namespace and chroot)" >&2; exit 1; }

venv=${LLMTRAIN_VENV:-$HOME/.cache/llmtrain/venv}
binds=("$here" /dev /proc /sys)
[[ -d /dev/shm ]] && binds+=(/dev/shm)
ccache_dir=$(ccache -k cache_dir 2>/dev/null || echo "${CCACHE_DIR:-$HOME/.cache/ccache}")
[[ -d "$ccache_dir" ]] && binds+=("$ccache_dir")
[[ -d "$HOME/.config/ccache" ]] && binds+=("$HOME/.config/ccache")
if [[ -f "$venv/pyvenv.cfg" ]]; then
  binds+=("$venv")
  pyhome=$(sed -n 's/^home *= *//p' "$venv/pyvenv.cfg")
  # The interpreter's installation (pyenv's versions/X, or /usr for a system one:
  # trixie's /usr must stay, so only a non-/usr home is bound).
  [[ -n "$pyhome" && "$pyhome" != /usr/bin ]] && binds+=("$(dirname "$pyhome")")
fi
((bare)) || [[ ! -d /usr/local/cuda/ ]] || binds+=("$(readlink -f /usr/local/cuda)")
[[ -n "${LLMTRAIN_TRIXIE_BIND:-}" ]] && read -ra extra <<<"$LLMTRAIN_TRIXIE_BIND" && binds+=("${extra[@]}")

# A private mount namespace: the binds vanish with the command.
# shellcheck disable=SC2016  # expanded by the inner bash
script='set -e; r=$1; shift; n=$1; shift
for ((i = 0; i < n; i++)); do d=$1; shift; mkdir -p "$r$d"; mount --rbind "$d" "$r$d"; done
c=$(readlink -f /usr/local/cuda 2>/dev/null || true)
[[ -n $c && -d $r$c && ! -e $r/usr/local/cuda ]] && ln -s "$(readlink -f /usr/local/cuda)" "$r/usr/local/cuda"
cp /etc/resolv.conf "$r/etc/resolv.conf" 2>/dev/null || true
cwd=$1; shift
p=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin; [[ -x $r/usr/local/cuda/bin/nvcc ]] && p=$p:/usr/local/cuda/bin
exec chroot "$r" /usr/bin/env -i HOME="$HOME" PATH=$p LANG=C.UTF-8 \
  TERM=dumb CCACHE_DIR="$CCACHE_DIR" ${LLMTRAIN_VENV:+LLMTRAIN_VENV=$LLMTRAIN_VENV} \
  bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"'
CCACHE_DIR=$ccache_dir exec unshare -m --propagation private bash -c "$script" - "$root" "${#binds[@]}" "${binds[@]}" "$PWD" "$@"
