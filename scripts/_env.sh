# Sourced by scripts/*: make (once) and activate the project's virtualenv (its bin has moe-bench).
#
# The venv sees the system site-packages, so a GPU box's own CUDA build of torch is used where one
# is installed; where no torch imports, the CPU build is pinned (a plain `torch` requirement would
# pull a multi-GB CUDA wheel). Set MOE_VENV to use another folder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MOE_VENV:-$ROOT/.venv}"
TORCH_CPU_PIN="torch==2.13.0"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV" >&2
  python3 -m venv --system-site-packages "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
if ! python -c "import torch" 2>/dev/null; then
  echo "[setup] no torch here: installing the CPU build ($TORCH_CPU_PIN)" >&2
  python -m pip install -q "$TORCH_CPU_PIN"
fi
# On CPU, let glibc keep freed memory in its heap (no mmap for large blocks, no trimming), the way
# the CUDA caching allocator keeps freed segments. Otherwise every out-of-place conversion pays
# first-touch page faults on its new output (about 74k faults, +100 ms, per 288 MiB layer here),
# a cost a GPU does not have. Faults are still counted (`measure`: faults, minor_faults).
export MALLOC_MMAP_MAX_="${MALLOC_MMAP_MAX_:-0}"
export MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-1099511627776}"
install_project() {  # install_project EXTRAS  (e.g. "test,bench"); skipped when nothing changed
  local stamp="$VENV/.installed-$1"
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    echo "[setup] installing moe-convert-bench[$1]" >&2
    python -m pip install -q -e "$ROOT[$1]"
    touch "$stamp"
  fi
}

use_machine() {  # record this machine for asv; sets machine, device, launch; exports the profile
  # moe-bench machine decides the profile (MOE_BENCH_PROFILE, else full on CUDA, cpu elsewhere:
  # moe_bench/profiles.py); exported, so the benchmarks run under the profile recorded.
  local facts
  facts=$(moe-bench machine --shell ${MOE_BENCH_MACHINE:+--name "$MOE_BENCH_MACHINE"})
  eval "$facts"  # machine=NAME device=cuda|cpu profile=full|cpu
  export MOE_BENCH_PROFILE="$profile"
  # CUDA: a fresh interpreter per benchmark (fork breaks CUDA); CPU: forked from one preloaded one.
  if [ "$device" = cuda ]; then launch=spawn; else launch=forkserver; fi
}
