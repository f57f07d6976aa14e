#!/usr/bin/env bash
# Installs what loom needs to build and test on Debian 12: compilers, CMake,
# the C++ libraries (Debian packages only) and, with --test, the Python test
# tooling from PyPI. Safe to run again: installs only what is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3 python3-pip
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libre2-dev libicu-dev
  libboost-dev libgtest-dev libgmock-dev libbenchmark-dev
  openmpi-bin libopenmpi-dev clang libclang-rt-14-dev unzip
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${1:-}" = "--test" ]; then
  python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/requirements-test.txt" 2>&1 \
    | grep -v "Running pip as the 'root' user" || true
fi
