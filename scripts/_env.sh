# Sourced by scripts/*: the checkout's lock (lock_checkout) and its virtualenv (install_project:
# made once, then activated; its bin has moe-bench).
#
# The venv sees the system site-packages, so a GPU box's own CUDA build of torch is used where one
# is installed; where none is installed, the CPU build is pinned (a plain `torch` requirement would
# pull a multi-GB CUDA wheel). Set MOE_VENV to use another folder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MOE_VENV:-$ROOT/.venv}"
TORCH_CPU_PIN="torch==2.13.0"
# The lock of the checkout (git-ignored): held, through flock, by the run whose command, pid and
# start time it holds. The kernel drops a flock when its holder dies, so a killed run's lock
# never blocks; the text a dead run left is read only by a run that finds the lock held (the new
# holder's text replaces it at once).
LOCK="$ROOT/.run.lock"
# Seconds a run waits for another one in this checkout (MOE_BENCH_LOCK_WAIT; 0: do not wait). A
# PR gate takes about 6 min here (docs/timing.md): 15 min covers one queued ahead of it.
LOCK_WAIT_DEFAULT=900
EX_TEMPFAIL=75  # sysexits.h: a temporary failure, try again later

# On CPU, let glibc keep freed memory in its heap (no mmap for large blocks, no trimming), the way
# the CUDA caching allocator keeps freed segments. Otherwise every out-of-place conversion pays
# first-touch page faults on its new output (about 74k faults, +100 ms, per 288 MiB layer here),
# a cost a GPU does not have. Faults are still counted (`measure`: faults, minor_faults).
export MALLOC_MMAP_MAX_="${MALLOC_MMAP_MAX_:-0}"
export MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-1099511627776}"

lock_checkout() {  # lock_checkout NAME "$@": one run at a time in this checkout (bench, nightly, ...)
  local name=$1 wait="${MOE_BENCH_LOCK_WAIT:-$LOCK_WAIT_DEFAULT}"
  shift
  command -v flock >/dev/null || { echo "[$name] flock is not on PATH (util-linux)" >&2; exit 2; }
  [[ $wait =~ ^[0-9]+$ ]] || {
    echo "[$name] MOE_BENCH_LOCK_WAIT=$wait: give whole seconds (0: do not wait)" >&2
    exit 2
  }
  # fd 9 holds the lock until this shell and every child that inherited it (asv) have exited.
  exec 9>>"$LOCK"
  if ! flock -w "$wait" 9; then
    echo "[$name] this checkout is busy: $(cat "$LOCK" 2>/dev/null || echo 'another run')" \
      "holds $LOCK; waited $wait s (MOE_BENCH_LOCK_WAIT); try again later" >&2
    exit "$EX_TEMPFAIL"
  fi
  echo "scripts/$name${*:+ $*} (pid $$, started $(date -u +%Y-%m-%dT%H:%M:%SZ))" >"$LOCK"
}

install_project() {  # install_project EXTRAS  (e.g. "test,bench"); skipped when nothing changed
  local said
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV" >&2
    if ! said=$(python3 -m venv --system-site-packages "$VENV" 2>&1); then
      echo "[setup] python3 -m venv failed: $(echo "$said" | grep -m1 . || echo 'no message')" \
        "(a python3 >= 3.10 with venv on PATH? Debian: apt-get install python3-venv)" >&2
      exit 2
    fi
  fi
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  # find_spec, not an import: torch's import takes 2 s, paid by every script call otherwise
  if ! python -c "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"; then
    echo "[setup] no torch here: installing the CPU build ($TORCH_CPU_PIN)" >&2
    python -m pip install -q "$TORCH_CPU_PIN"
  fi
  local stamp="$VENV/.installed-$1"
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    echo "[setup] installing moe-convert-bench[$1]" >&2
    python -m pip install -q -e "$ROOT[$1]"
    touch "$stamp"
  fi
}

use_machine() {  # record this machine for asv; sets machine, device, launch; exports the profile
  # moe-bench machine decides the profile (MOE_BENCH_PROFILE, else full on CUDA, cpu elsewhere:
  # moe_suite/profiles.py); exported, so the benchmarks run under the profile recorded.
  local facts
  facts=$(moe-bench machine --shell ${MOE_BENCH_MACHINE:+--name "$MOE_BENCH_MACHINE"})
  eval "$facts"  # machine=NAME device=cuda|cpu profile=full|cpu
  export MOE_BENCH_PROFILE="$profile"
  # CUDA: a fresh interpreter per benchmark (fork breaks CUDA); CPU: forked from one preloaded one.
  if [ "$device" = cuda ]; then launch=spawn; else launch=forkserver; fi
}
