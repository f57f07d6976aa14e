#!/usr/bin/env bash
# Downloads (here, with network) the Debian packages that the GPU machine's
# image lacks for building loom with CUDA: fmt, spdlog, GoogleTest, PCRE2, RE2,
# Boost headers, nlohmann-json, CLI11.
# They land in .cuda-deps/ (git-ignored through .git/info/exclude); carry that
# folder to the device and run scripts/gpu/device_e2e.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .git/info .cuda-deps
grep -qx "/.cuda-deps/" .git/info/exclude 2>/dev/null || echo "/.cuda-deps/" >> .git/info/exclude
cd .cuda-deps
apt-get download libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 libgtest-dev libpcre2-dev libpcre2-8-0 \
  libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libre2-dev libre2-9 libboost1.74-dev nlohmann-json3-dev \
  libcli11-dev
ls -la
