#!/usr/bin/env bash
# Installs the Debian packages Baton needs to build, test and run its tools.
# Idempotent and non-interactive: packages already installed are skipped, and
# `apt-get update` runs once, only when something is missing.
#
#   deploy/install-deps.sh            install what is missing
#   deploy/install-deps.sh --test     also what the test suite's browser and
#                                     client tests need: Debian's chromium, Node.js
#                                     and npm, and `npm ci` in tests/js (the official
#                                     openai client, playwright-core)
#   deploy/install-deps.sh --dry-run  only print what would be installed
#
# Runs as root, or as a user with sudo. CUDA is not installed here: the CUDA
# backend is optional (cmake -DBATON_CUDA=AUTO builds it when nvcc is found).
set -euo pipefail

readonly PACKAGES=(
  # toolchain and build
  build-essential cmake ninja-build pkg-config git
  # gRPC / protobuf
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # libraries
  libabsl-dev libzstd-dev zstd libssl-dev libxxhash-dev libicu-dev nlohmann-json3-dev libcpp-httplib-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # reference checks and the tiny-model trainer
  python3 python3-numpy python3-torch bible-kjv-text bible-kjv sentencepiece libopenblas0-pthread
  # fuzzing (libFuzzer)
  clang libclang-rt-14-dev
  # e2e scripts, TLS test certificates, WAN emulation (ip netns, tc; packet
  # loss from nftables where the kernel lacks netem)
  curl openssl iproute2 nftables
  # deployment lint (YAML, shell)
  python3-yaml shellcheck
  # the split benchmark's plot
  gnuplot-nox
)
# Only with --test (tests/run-all.sh): the web page's browser test and the
# OpenAI-client test. nodejs/npm are skipped when a node and npm are already
# on PATH (a NodeSource or distro install both do).
readonly TEST_PACKAGES=(chromium)

dry_run=0
test_profile=0
for arg in "$@"; do
  case "${arg}" in
    --dry-run) dry_run=1 ;;
    --test) test_profile=1 ;;
    -h|--help)
      # The header comment is the help text.
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
      exit 0 ;;
    *)
      echo "install-deps.sh: unknown argument '${arg}' (see --help)" >&2
      exit 2 ;;
  esac
done

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps.sh: needs a Debian/Ubuntu system (apt-get, dpkg-query)" >&2
  exit 1
fi

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

wanted=("${PACKAGES[@]}")
if (( test_profile )); then
  wanted+=("${TEST_PACKAGES[@]}")
  command -v node >/dev/null 2>&1 || wanted+=(nodejs)
  command -v npm >/dev/null 2>&1 || wanted+=(npm)
fi

# `npm ci` in tests/js, from its package-lock.json (the npm registry), once per
# lock file: a stamp beside node_modules records which lock it installed.
install_js_test_clients() {
  (( test_profile )) || return 0
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
