#!/usr/bin/env python3
"""Writes tests/backend/fixtures/quant_<type>.bin: random GGUF blocks of each
quantised type and their values as dequantised by the `gguf` Python package
(ggml's own reference, independent of our code). test_quant checks that
loom's dequantize_row reproduces them bit for bit.

File layout (little endian): u32 n_values, u32 n_bytes, n_bytes of blocks,
n_values f32. Usage: pip install gguf numpy; python3 make_quant_fixtures.py
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

rng = np.random.default_rng(20240601)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")

# (type, values, byte offsets of f16 scale/min fields within a block, block bytes,
# values per block). New types go at the end: the shared generator then leaves
# the earlier fixtures unchanged.
TYPES = {
    "q8_0": (T.Q8_0, 32 * 64, [0], 34, 32),
    "q4_0": (T.Q4_0, 32 * 64, [0], 18, 32),
    "q4_K": (T.Q4_K, 256 * 16, [0, 2], 144, 256),
    "q5_K": (T.Q5_K, 256 * 16, [0, 2], 176, 256),
    "q6_K": (T.Q6_K, 256 * 16, [208], 210, 256),
    "q4_1": (T.Q4_1, 32 * 128, [0, 2], 20, 32),
    "q5_0": (T.Q5_0, 32 * 128, [0], 22, 32),
    "q5_1": (T.Q5_1, 32 * 128, [0, 2], 24, 32),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, (qtype, n, scale_offsets, block_bytes, block_elems) in TYPES.items():
        blocks = n // block_elems
        raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
        # Every other bit pattern is fair game; keep the f16 scales finite and
        # of a realistic size (some negative, as ggml's quantisers may write).
        for off in scale_offsets:
            d = (rng.uniform(1e-4, 0.05, size=blocks) * rng.choice([-1, 1], size=blocks)).astype(np.float16)
            raw[:, off:off + 2] = d.view(np.uint8).reshape(blocks, 2)
        values = quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == n, (name, values.size)
        with open(os.path.join(OUT, f"quant_{name}.bin"), "wb") as f:
            f.write(struct.pack("<II", n, raw.size))
            f.write(raw.tobytes())
            f.write(values.astype("<f4").tobytes())
        print(name, n, "values")


if __name__ == "__main__":
    main()
