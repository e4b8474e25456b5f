#!/usr/bin/env bash
# Installs the Debian packages Baton needs, by profile, so each set-up command
# waits only for what it uses. Idempotent and non-interactive: packages already
# installed are skipped, and `apt-get update` runs once, only when something is
# missing.
#
#   deploy/install-deps.sh [--profile P[,P...]] [--dry-run]
#
# Profiles (combine with commas or repeat --profile; default: run):
#   run    build and run the three programs: toolchain, gRPC/protobuf, Abseil,
#          zstd, OpenSSL, xxHash, ICU, nlohmann-json, cpp-httplib, hiredis, and
#          GoogleTest / Google Benchmark (the one build configuration of deploy/build.sh
#          configures the test targets too). What deploy/main-job.sh installs.
#   test   run, plus what the test suite uses: Python 3 with NumPy and YAML (the
#          NumPy reference, deploy lint), shellcheck, curl, redis-server and
#          redis-tools (the state tier's tests), openssl (test certificates),
#          iproute2 and nftables (WAN emulation), gnuplot-nox (the split
#          benchmark's plot), Debian's chromium, Node.js and npm, and
#          `npm ci` in tests/js (the official openai client, playwright-core),
#          oneDNN (the microbenchmark that compares our kernels with it).
#          What tests/run-all.sh installs.
#   train  the tiny-model trainer (train_tiny_model.py): python3-torch,
#          NumPy, the KJV text, sentencepiece, OpenBLAS.
#   fuzz   the libFuzzer targets (tests/fuzz/build.sh): clang, its libFuzzer
#          runtime and the libraries of the run profile; clang also builds
#          tests/run-sanitized.sh tsan.
#   all    every profile.
#   --test      the same as --profile test
#   --dry-run   only print what would be installed
#
# Runs as root, or as a user with sudo. CUDA is not installed here: the CUDA
# backend is optional (cmake -DBATON_CUDA=AUTO builds it when nvcc is found).
set -euo pipefail

# run: build and run baton-prefill, baton-edge and baton.
readonly RUN_PACKAGES=(
  # toolchain and build (git: the commit in --version)
  build-essential cmake ninja-build pkg-config git
  # gRPC / protobuf
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # libraries
  libabsl-dev libzstd-dev libssl-dev libxxhash-dev libicu-dev nlohmann-json3-dev libcpp-httplib-dev
  # the shared state tier's Redis client (RESP parsing only)
  libhiredis-dev
  # the test targets' libraries: tests/CMakeLists.txt finds them at configure
  # time, and both set-up commands configure the same build
  libgtest-dev libgmock-dev libbenchmark-dev
)
# test: what ctest's tests call besides the build (run is included).
readonly TEST_PACKAGES=(
  # the NumPy reference forward (tests/tools), deploy lint (YAML, shell)
  python3 python3-numpy python3-yaml shellcheck
  # e2e scripts, TLS test certificates, WAN emulation (ip netns, tc; packet
  # loss from nftables where the kernel lacks netem)
  curl openssl iproute2 nftables
  # the state tier's tests start real Redis servers and clusters
  redis-server redis-tools
  # the split benchmark's plot
  gnuplot-nox
  # the web page's browser test; nodejs/npm are added below only when no node
  # and npm are on PATH (a NodeSource or distro install both do)
  chromium
  # oneDNN: tests/bench/onednn_bench.cc (our prefill kernels against its
  # GEMMs) compiles where it is found; CI builds it so it stays compiling
  libdnnl-dev
)
# train: the tiny-model trainer (the bundled model's recipe).
readonly TRAIN_PACKAGES=(
  python3 python3-numpy python3-torch bible-kjv-text bible-kjv sentencepiece libopenblas0-pthread
)
# fuzz: tests/fuzz/build.sh (clang + libFuzzer over the run profile's libraries).
readonly FUZZ_PACKAGES=(clang libclang-rt-14-dev)

dry_run=0
profiles=()
add_profiles() {
  local list=$1 profile names
  [[ -n "${list}" ]] || { echo "install-deps.sh: --profile needs a name: run, test, train, fuzz or all" >&2; exit 2; }
  IFS=, read -r -a names <<< "${list}"
  for profile in "${names[@]}"; do
    case "${profile}" in
      run|test|train|fuzz) profiles+=("${profile}") ;;
      all) profiles+=(run test train fuzz) ;;
      *) echo "install-deps.sh: unknown profile '${profile}' (run, test, train, fuzz or all)" >&2; exit 2 ;;
    esac
  done
}
while (( $# > 0 )); do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --test) add_profiles test ;;
    --profile) add_profiles "${2:-}"; shift ;;
    --profile=*) add_profiles "${1#--profile=}" ;;
    -h|--help)
      # The header comment is the help text.
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0 ;;
    *)
      echo "install-deps.sh: unknown argument '$1' (see --help)" >&2
      exit 2 ;;
  esac
  shift
done
(( ${#profiles[@]} > 0 )) || profiles=(run)

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps.sh: needs a Debian/Ubuntu system (apt-get, dpkg-query)" >&2
  exit 1
fi

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

has_profile() {
  local profile
  for profile in "${profiles[@]}"; do [[ "${profile}" == "$1" ]] && return 0; done
  return 1
}

# Every profile but train builds something, so it starts from run's packages.
wanted=()
if has_profile run || has_profile test || has_profile fuzz; then wanted+=("${RUN_PACKAGES[@]}"); fi
if has_profile test; then
  wanted+=("${TEST_PACKAGES[@]}")
  command -v node >/dev/null 2>&1 || wanted+=(nodejs)
  command -v npm >/dev/null 2>&1 || wanted+=(npm)
fi
if has_profile train; then wanted+=("${TRAIN_PACKAGES[@]}"); fi
if has_profile fuzz; then wanted+=("${FUZZ_PACKAGES[@]}"); fi
# Profiles overlap (python3 is in test and train): each package once, in order.
mapfile -t wanted < <(printf '%s\n' "${wanted[@]}" | awk '!seen[$0]++')
echo "install-deps.sh: profile(s) $(printf '%s\n' "${profiles[@]}" | awk '!seen[$0]++' | paste -sd, -): ${#wanted[@]} packages"

# `npm ci` in tests/js, from its package-lock.json (the npm registry), once per
# lock file: a stamp beside node_modules records which lock it installed.
install_js_test_clients() {
  has_profile test || return 0
  local dir lock_sum
  dir="$(cd "$(dirname "$0")/.." && pwd)/tests/js"
  lock_sum=$(sha256sum "${dir}/package-lock.json" | cut -d' ' -f1)
  if [[ -f "${dir}/node_modules/.baton-lock-sha256" &&
        "$(cat "${dir}/node_modules/.baton-lock-sha256")" == "${lock_sum}" ]]; then
    echo "install-deps.sh: tests/js node modules are up to date"
    return 0
  fi
  if (( dry_run )); then
    echo "install-deps.sh: --dry-run, would run npm ci in tests/js"
    return 0
  fi
  (cd "${dir}" && npm ci --no-audit --no-fund --loglevel=error)
  echo "${lock_sum}" > "${dir}/node_modules/.baton-lock-sha256"
}

missing=()
for package in "${wanted[@]}"; do
  is_installed "${package}" || missing+=("${package}")
done

if (( ${#missing[@]} == 0 )); then
  echo "install-deps.sh: all ${#wanted[@]} packages are already installed"
  install_js_test_clients
  exit 0
fi

echo "install-deps.sh: installing ${#missing[@]} package(s): ${missing[*]}"
if (( dry_run )); then
  echo "install-deps.sh: --dry-run, nothing installed"
  exit 0
fi

as_root=()
if (( EUID != 0 )); then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install-deps.sh: not root and sudo is not available; run as root" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
  --no-install-recommends -o Dpkg::Options::=--force-confdef \
  -o Dpkg::Options::=--force-confold "${missing[@]}"

still_missing=()
for package in "${missing[@]}"; do
  is_installed "${package}" || still_missing+=("${package}")
done
if (( ${#still_missing[@]} != 0 )); then
  echo "install-deps.sh: still missing after install: ${still_missing[*]}" >&2
  exit 1
fi
echo "install-deps.sh: done (${#missing[@]} installed, $(( ${#wanted[@]} - ${#missing[@]} )) already present)"
install_js_test_clients
