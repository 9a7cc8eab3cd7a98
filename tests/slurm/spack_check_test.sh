#!/usr/bin/env bash
# scripts/spack-check.py against spack/spack-packages at its pinned commit: the
# project's spack.yaml and package.py pass, and a copy with a misspelt dependency
# (package.py: pcre2 -> pcre3; spack.yaml: openmpi -> opnempi) fails naming it.
# Skips (77) only where no spack-packages repository is on this machine.
set -uo pipefail
src=${LLMTRAIN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
py=$(command -v python3)
out=$("$py" "$src/scripts/spack-check.py" 2>&1); rc=$?
echo "$out"
((rc == 77)) && exit 77
((rc == 0)) || { echo "spack_packages: the project's Spack files fail the check (rc $rc)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r "$src/spack/spack_repo" "$tmp/"
sed -i 's/depends_on("pcre2")/depends_on("pcre3")/' "$tmp/spack_repo/llmtrain/packages/llmtrain/package.py"
sed 's/^  - openmpi /  - opnempi /' "$src/spack.yaml" >"$tmp/spack.yaml"
if ! grep -q pcre3 "$tmp/spack_repo/llmtrain/packages/llmtrain/package.py" || ! grep -q opnempi "$tmp/spack.yaml"; then
  echo "spack_packages: could not misspell the copies (package.py or spack.yaml changed shape)"; exit 1
fi
out=$("$py" "$src/scripts/spack-check.py" --env "$tmp/spack.yaml" --repo "$tmp/spack_repo/llmtrain" 2>&1); rc=$?
echo "$out"
((rc == 1)) || { echo "spack_packages: the misspelt copy gave rc $rc, expected 1"; exit 1; }
for name in pcre3 opnempi; do
  grep -q "[' ]${name}[ :'].*no such package" <<<"$out" || { echo "spack_packages: '$name' was not named as missing"; exit 1; }
done
[[ $(grep -c 'no such package' <<<"$out") -eq 2 ]] || { echo "spack_packages: expected exactly the 2 misspelt names"; exit 1; }
echo "spack_packages: passed (the real files pass; both misspelt names are named)"
