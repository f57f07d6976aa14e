#!/usr/bin/env bash
# Kernel-level profile of a CUDA command without nsys: builds the CUPTI
# injection library tools/gpu_profile/cupti_trace.cpp and runs the command with
# CUDA_INJECTION64_PATH pointing at it. At exit the process prints a table on
# stderr (kernels by total time, memcpy/memset, GPU busy vs idle, idle gaps,
# optional per-step figures) and writes PREFIX.json and PREFIX.txt.
#
#   scripts/gpu/kernel_profile.sh [--skip S] [--max S] [--step-kernel NAME] [--top N]
#                                 [--out PREFIX] -- COMMAND...
#   scripts/gpu/kernel_profile.sh --build-only     # just compile (prints the .so path)
#   scripts/gpu/kernel_profile.sh --selftest       # summary logic on synthetic records
#
#   --skip S          ignore activities starting in the first S s after the first one
#   --max S           then keep S s only
#   --step-kernel N   a kernel whose name contains N starts each step (e.g. embedding)
#   --top N           kernels listed (40)
#   --out PREFIX      output files (default $LOOM_TRACE_OUT or /tmp/loom_trace)
#
# CUPTI (headers and libcupti.so*, from one release) is looked up in $CUPTI_ROOT
# (a directory with include/ and lib/), then in the pip "nvidia" packages
# (nvidia/cu13, nvidia/cuda_cupti, ...), then in /usr/local/cuda/extras/CUPTI.
# cuda.h comes from the CUPTI include dir, $CUDA_HOME, /usr/local/cuda, nvcc's
# toolkit or the pip packages.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
src=$repo/tools/gpu_profile/cupti_trace.cpp
build=$repo/build/gpu_profile
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

skip='' max='' step='' top='' out=${LOOM_TRACE_OUT:-/tmp/loom_trace} mode=run
while [ $# -gt 0 ]; do
  case $1 in
    --skip) skip=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --step-kernel) step=$2; shift 2 ;;
    --top) top=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build-only) mode=build; shift ;;
    --selftest) mode=selftest; shift ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "kernel_profile.sh: unknown option $1" >&2; usage 2 ;;
  esac
done
mkdir -p "$build"
CXX=${CXX:-g++}
flags=(-std=c++17 -O2 -Wall -Wextra -pthread -fvisibility=hidden)

if [ "$mode" = selftest ]; then
  "$CXX" "${flags[@]}" -DLOOM_TRACE_SELFTEST "$src" -o "$build/cupti_trace_selftest"
  exec "$build/cupti_trace_selftest"
fi
if [ "$mode" = run ] && [ $# -eq 0 ]; then
  echo "kernel_profile.sh: no command (put it after --)" >&2; usage 2
fi

# --- locate CUPTI -------------------------------------------------------------
roots=()
[ -n "${CUPTI_ROOT:-}" ] && roots+=("$CUPTI_ROOT")
if command -v python3 > /dev/null; then
  while IFS= read -r p; do
    [ -n "$p" ] || continue
    for d in "$p"/cu13 "$p"/cuda_cupti "$p"/*/; do roots+=("${d%/}"); done
  done < <(python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2> /dev/null || true)
fi
[ -n "${CUDA_HOME:-}" ] && roots+=("$CUDA_HOME/extras/CUPTI")
roots+=(/usr/local/cuda/extras/CUPTI)
inc='' lib=''
for r in "${roots[@]}"; do
  [ -f "$r/include/cupti.h" ] || continue
  for l in "$r"/lib/libcupti.so* "$r"/lib64/libcupti.so*; do
    [ -e "$l" ] && { lib=$l; break; }
  done
  [ -n "$lib" ] && { inc=$r/include; break; }
done
if [ -z "$lib" ]; then
  echo "kernel_profile.sh: no CUPTI found (include/cupti.h + lib/libcupti.so*); looked in: ${roots[*]}" >&2
  echo "  pip install nvidia-cuda-cupti (or set CUPTI_ROOT)" >&2
  exit 1
fi
includes=(-I "$inc")
# (pip's CUPTI include dir may carry cuda.h without the crt/ headers it includes)
if [ ! -f "$inc/cuda.h" ] || [ ! -f "$inc/crt/host_defines.h" ]; then
  cands=()
  [ -n "${CUDA_HOME:-}" ] && cands+=("$CUDA_HOME/include")
  cands+=(/usr/local/cuda/include)
  command -v nvcc > /dev/null && cands+=("$(dirname "$(command -v nvcc)")/../include")
  for r in "${roots[@]}"; do cands+=("$r/include"); done
  found=''
  for c in "${cands[@]}"; do
    [ -f "$c/cuda.h" ] && [ -f "$c/crt/host_defines.h" ] && { includes+=(-I "$c"); found=1; break; }
  done
  [ -n "$found" ] || { echo "kernel_profile.sh: cuda.h not found (set CUDA_HOME)" >&2; exit 1; }
fi

# The activity record structs CUPTI fills are the newest ones the header defines.
defs=()
for what in Kernel Memcpy Memset; do
  t=$(grep -oE "^\} CUpti_Activity${what}[0-9]*;" "$inc/cupti_activity.h" | tail -1 | tr -d '}; ' || true)
  [ -n "$t" ] && defs+=("-DLOOM_CUPTI_${what^^}_T=$t")
done

so=$build/libloom_cupti_trace.so
"$CXX" "${flags[@]}" -shared -fPIC "${defs[@]}" "${includes[@]}" "$src" -o "$so" \
  "$lib" -Wl,-rpath,"$(cd "$(dirname "$lib")" && pwd)"
echo "kernel_profile.sh: built $so against $lib (${defs[*]})" >&2
if [ "$mode" = build ]; then echo "$so"; exit 0; fi

# exec keeps this pid: children that use CUDA write PREFIX.<pid>.* instead
export CUDA_INJECTION64_PATH=$so LOOM_TRACE_OUT=$out LOOM_TRACE_MAIN_PID=$$
[ -n "$skip" ] && export LOOM_TRACE_SKIP_S=$skip
[ -n "$max" ] && export LOOM_TRACE_MAX_S=$max
[ -n "$step" ] && export LOOM_TRACE_STEP_KERNEL=$step
[ -n "$top" ] && export LOOM_TRACE_TOP=$top
exec "$@"
