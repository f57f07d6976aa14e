#!/usr/bin/env python3
"""Writes the loader's cross-check fixtures with the reference writers (the
`gguf` and `safetensors` PyPI packages), plus a JSON file of what a reader
must find in them. tests/loader/test_fixtures.cpp compares loom's readers
against that JSON, so the format is checked against code other than ours.

Usage: python3 scripts/make_loader_fixtures.py [OUT_DIR]
       (default tests/fixtures/loader; needs: pip install gguf safetensors numpy)
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import save_file

out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "loader")
os.makedirs(out_dir, exist_ok=True)
rng = np.random.default_rng(0)
expected = {"gguf": {"metadata": {}, "tensors": []}, "safetensors": {"tensors": []}}

# ---- GGUF
path = os.path.join(out_dir, "tiny.gguf")
w = gguf.GGUFWriter(path, arch="llama")  # adds general.architecture
meta = expected["gguf"]["metadata"]
meta["general.architecture"] = {"type": "string", "value": "llama"}
for kind, add, value in [
    ("u8", w.add_uint8, 200), ("i8", w.add_int8, -100), ("u16", w.add_uint16, 60000),
    ("i16", w.add_int16, -30000), ("u32", w.add_uint32, 4000000000), ("i32", w.add_int32, -2000000000),
    ("u64", w.add_uint64, 2**63 + 5), ("i64", w.add_int64, -(2**62)), ("f32", w.add_float32, 0.25),
    ("f64", w.add_float64, 1e-300), ("bool", w.add_bool, True), ("string", w.add_string, "héllo"),
]:
    add("test." + kind, value)
    meta["test." + kind] = {"type": kind, "value": value}
w.add_array("test.arr_str", ["a", "", "ccc"])
meta["test.arr_str"] = {"type": "array", "value": ["a", "", "ccc"]}
w.add_array("test.arr_int", [1, 2, 3])
meta["test.arr_int"] = {"type": "array", "value": [1, 2, 3]}
w.add_array("test.arr_nested", [[1, 2], [3]])
meta["test.arr_nested"] = {"type": "array", "value": [[1, 2], [3]]}


def add_tensor(name, ggml_type, shape, data_bytes):
    """shape: logical, outermost first; data_bytes: uint8, shaped rows x bytes per row."""
    w.add_tensor(name, data_bytes, raw_dtype=ggml_type)  # byte shape: rows x bytes per row
    expected["gguf"]["tensors"].append({
        "name": name, "ggml_type": int(ggml_type), "shape": list(shape),
        "nbytes": int(data_bytes.size), "first": int(data_bytes.reshape(-1)[0]),
        "last": int(data_bytes.reshape(-1)[-1]), "sum": int(data_bytes.astype(np.uint64).sum())})


f32 = rng.standard_normal((3, 64)).astype(np.float32)
add_tensor("token_embd.weight", Q.F32, (3, 64), f32.view(np.uint8))
add_tensor("output_norm.weight", Q.F16, (64,), rng.standard_normal(64).astype(np.float16).view(np.uint8))
add_tensor("blk.0.attn_q.weight", Q.Q8_0, (2, 64), gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), Q.Q8_0))
add_tensor("blk.0.attn_k.weight", Q.Q4_0, (2, 64), gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), Q.Q4_0))
for name, t in [("blk.0.ffn_up.weight", Q.Q4_K), ("blk.0.ffn_gate.weight", Q.Q5_K), ("blk.0.ffn_down.weight", Q.Q6_K)]:
    _, type_size = gguf.GGML_QUANT_SIZES[t]
    add_tensor(name, t, (2, 256), rng.integers(0, 256, size=(2, type_size), dtype=np.uint8))
add_tensor("blk.0.attn_v.weight", Q.BF16, (2, 3, 4), rng.integers(0, 256, size=(2, 3, 8), dtype=np.uint8))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()

# ---- safetensors
tensors = {
    "model.embed_tokens.weight": rng.standard_normal((4, 3)).astype(np.float32),
    "model.norm.weight": rng.standard_normal(3).astype(np.float16),
    "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((3, 3)).astype(np.float32),
    "positions": np.arange(5, dtype=np.int64),
    "ids": np.arange(2, dtype=np.int32),
    "scalar": np.array(7, dtype=np.int8),
}
save_file(tensors, os.path.join(out_dir, "tiny.safetensors"), metadata={"format": "pt"})
dtype_names = {np.float32: "F32", np.float16: "F16", np.int64: "I64", np.int32: "I32", np.int8: "I8"}
for name, a in tensors.items():
    b = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    expected["safetensors"]["tensors"].append({
        "name": name, "dtype": dtype_names[a.dtype.type], "shape": list(a.shape), "nbytes": int(b.size),
        "first": int(b[0]), "last": int(b[-1]), "sum": int(b.astype(np.uint64).sum())})

with open(os.path.join(out_dir, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1)
print("wrote", out_dir)
