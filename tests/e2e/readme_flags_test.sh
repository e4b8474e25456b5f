#!/usr/bin/env bash
# The README tells the truth about the command line: every flag that
# baton-prefill, baton-edge and each baton command list in --help is in that
# program's README flag table, and every flag a table lists exists
# (tests/tools/readme_flags.py says how tables and help texts are read); and
# the README refers to no file outside the repository, and to no repository
# path that does not exist.
# usage: readme_flags_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
source_dir=$2
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"${python}" "${source_dir}/tests/tools/readme_flags.py" "${bin}" "${source_dir}/README.md" ||
  fail "the README's flag tables and the programs' --help disagree (MISMATCH lines above)"
"${python}" "${source_dir}/tests/tools/readme_flags.py" --references "${source_dir}" "${source_dir}/README.md" ||
  fail "the README refers to files it should not (lines above)"
echo "readme flags test: ok"
