#!/usr/bin/env bash
# --version on every program (baton, baton-edge, baton-prefill): exit 0 and the
# same five fields: version, git commit, build type, SIMD level, CUDA on/off.
# Needs no other flag (baton-edge and baton-prefill otherwise require --model).
# usage: version_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for program in baton baton-edge baton-prefill; do
  out="${work}/${program}.version"
  rc=0
  "${bin}/${program}" --version > "${out}" 2> "${work}/${program}.err" || rc=$?
  [[ ${rc} -eq 0 ]] || fail "${program} --version: exit code ${rc}: $(cat "${work}/${program}.err")"
  grep -Eq "^${program} [0-9]+\.[0-9]+\.[0-9]+$" "${out}" || fail "${program}: no version line: $(cat "${out}")"
  grep -Eq "^git commit: +([0-9a-f]{7,}(-dirty)?|unknown)$" "${out}" || fail "${program}: no git commit: $(cat "${out}")"
  grep -Eq "^build type: +[A-Za-z]+$" "${out}" || fail "${program}: no build type: $(cat "${out}")"
  grep -Eq "^SIMD level: +(scalar|avx2|avx512)" "${out}" || fail "${program}: no SIMD level: $(cat "${out}")"
  grep -Eq "^CUDA: +(on|off)( |$)" "${out}" || fail "${program}: no CUDA on/off: $(cat "${out}")"
  [[ $(grep -c "" "${out}") -eq 5 ]] || fail "${program}: expected five lines: $(cat "${out}")"
  [[ ! -s "${work}/${program}.err" ]] || fail "${program} --version wrote to stderr: $(cat "${work}/${program}.err")"
done
# One build: the three agree on everything but the program name (and the
# edge's CUDA line: it has no CUDA backend).
for field in "git commit" "build type" "SIMD level"; do
  values=$(grep -h "^${field}:" "${work}"/*.version | sort -u | wc -l)
  [[ ${values} -eq 1 ]] || fail "the programs disagree on '${field}'"
done
# Inside a git checkout the commit is known; it is HEAD's.
source_dir=${2:-}
if [[ -n "${source_dir}" ]] && head=$(git -C "${source_dir}" rev-parse --short HEAD 2> /dev/null); then
  grep -q "^git commit: *${head}" "${work}/baton.version" ||
    echo "NOTE: the binaries were built from another commit than ${head} (rebuild to refresh): $(grep "^git commit" "${work}/baton.version")"
fi
cat "${work}/baton-prefill.version"
echo "version test: ok"
