#!/usr/bin/env bash
# Installs what loom needs to build and test on Debian 12: compilers, CMake,
# the C++ libraries (Debian packages only) and, with --test, the Python test
# tooling from PyPI, and fetches the pinned source of the dependencies Debian
# lacks into third_party/ (xgrammar's C++ core, built by CMake beside loom;
# CUTLASS's headers for the CUDA build). LOOM_THIRD_PARTY_DIR puts them
# elsewhere (then pass -DLOOM_XGRAMMAR_DIR / -DLOOM_CUTLASS_DIR to CMake).
# Safe to run again: installs only what is missing. --fetch-only: only the
# third_party/ sources (images whose distribution names packages otherwise).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3 python3-pip python3-venv
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libre2-dev libicu-dev
  libboost-dev libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev clang libclang-rt-14-dev unzip
)

fetch_only=0
[ "${1:-}" = "--fetch-only" ] && fetch_only=1
missing=()
for p in "${packages[@]}"; do
  [ "$fetch_only" = 1 ] && break
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
# Python packages go into a virtual environment, .venv (LOOM_VENV): Debian's
# own python3 is externally managed (PEP 668) and refuses pip installs. It
# sees the system's packages, so what is installed already is not fetched
# again. scripts/test.sh puts its bin/ first on PATH.
venv="${LOOM_VENV:-$root/.venv}"
[ -x "$venv/bin/python3" ] || python3 -m venv --system-site-packages "$venv"
py="$venv/bin/python3"
pip_q=("$py" -m pip -q --disable-pip-version-check)

if [ "${1:-}" = "--test" ]; then
  "${pip_q[@]}" install -r "$root/scripts/requirements-test.txt" 2>&1 \
    | grep -v "Running pip as the 'root' user" || true
  "$py" -c 'import pytest, openai, anthropic, jsonschema' # the install above succeeded
fi

# xgrammar (Apache-2.0): the grammar engine behind structured output. Its PyPI
# source distribution carries the C++ core (cpp/, include/, 3rdparty/); CMake
# builds that as a static library (cmake/xgrammar.cmake), never the Python
# bindings. pip needs the sdist's build backend only to read its metadata.
xgrammar_version=0.2.8
xgrammar_sha256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
# scripts/patches/xgrammar-<version>-*.patch fix bugs found by our tests,
# bound the jump-forward walk and let a compile be interrupted at its deadline
# (each says what it does); the stamp covers them,
# so a new patch re-extracts.
third_party="${LOOM_THIRD_PARTY_DIR:-$root/third_party}"
xgrammar_dir="$third_party/xgrammar"
xgrammar_stamp="$(cat "$root"/scripts/patches/xgrammar-"$xgrammar_version"-*.patch 2>/dev/null |
  sha256sum | cut -c1-16)-$xgrammar_sha256"
if [ "$(cat "$xgrammar_dir/.stamp" 2>/dev/null)" != "$xgrammar_stamp" ]; then
  echo "setup: fetching xgrammar $xgrammar_version (source)"
  "$py" -c 'import scikit_build_core, nanobind, setuptools_scm' 2>/dev/null ||
    "${pip_q[@]}" install "scikit-build-core>=0.10" "nanobind>=2.5" "setuptools_scm>=8" 2>&1 \
      | grep -v "Running pip as the 'root' user" || true
  work="$(mktemp -d)"
  "${pip_q[@]}" download --no-deps --no-binary :all: --no-build-isolation -d "$work" \
    "xgrammar==$xgrammar_version"
  sdist="$work/xgrammar-$xgrammar_version.tar.gz"
  if ! echo "$xgrammar_sha256  $sdist" | sha256sum -c --status; then
    echo "setup: $sdist has the wrong SHA-256" >&2; rm -rf "$work"; exit 1
  fi
  rm -rf "$xgrammar_dir"; mkdir -p "$xgrammar_dir"
  tar -xzf "$sdist" -C "$xgrammar_dir" --strip-components=1 \
    "xgrammar-$xgrammar_version/cpp" "xgrammar-$xgrammar_version/include" \
    "xgrammar-$xgrammar_version/3rdparty/picojson" "xgrammar-$xgrammar_version/3rdparty/dlpack/include" \
    "xgrammar-$xgrammar_version/LICENSE" "xgrammar-$xgrammar_version/NOTICE"
  for p in "$root"/scripts/patches/xgrammar-"$xgrammar_version"-*.patch; do
    [ -f "$p" ] && patch -s -p1 -d "$xgrammar_dir" < "$p"
  done
  echo "$xgrammar_stamp" > "$xgrammar_dir/.stamp"
  rm -rf "$work"
fi

# CUTLASS (BSD-3-Clause): the headers of its Hopper FP8 GEMM with blockwise
# scaling (src/backend/cuda/kernels/fp8/fp8_block_gemm_sm90.cu, cmake/cutlass.cmake).
# The nvidia-cutlass wheel carries them under cutlass_library/source/include
# (cutlass/ and cute/); only those and the licence are extracted.
cutlass_version=4.2.0.0
cutlass_sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
cutlass_dir="$third_party/cutlass"
if [ "$(cat "$cutlass_dir/.stamp" 2>/dev/null)" != "$cutlass_sha256" ]; then
  echo "setup: fetching CUTLASS $cutlass_version (headers)"
  work="$(mktemp -d)"
  "${pip_q[@]}" download --no-deps --only-binary :all: -d "$work" "nvidia-cutlass==$cutlass_version"
  wheel="$work/nvidia_cutlass-$cutlass_version-py3-none-any.whl"
  if ! echo "$cutlass_sha256  $wheel" | sha256sum -c --status; then
    echo "setup: $wheel has the wrong SHA-256" >&2; rm -rf "$work"; exit 1
  fi
  unzip -q "$wheel" 'cutlass_library/source/include/*' \
    "nvidia_cutlass-$cutlass_version.dist-info/licenses/LICENSE.txt" -d "$work/x"
  rm -rf "$cutlass_dir"; mkdir -p "$cutlass_dir"
  mv "$work/x/cutlass_library/source/include" "$cutlass_dir/include"
  mv "$work/x/nvidia_cutlass-$cutlass_version.dist-info/licenses/LICENSE.txt" "$cutlass_dir/LICENSE.txt"
  echo "$cutlass_sha256" > "$cutlass_dir/.stamp"
  rm -rf "$work"
fi
