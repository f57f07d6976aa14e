"""FP8 (E4M3) checkpoint helpers shared by scripts/make_fp8_fixtures.py (tiny CPU
fixtures) and scripts/gpu/make_fp8_model.py (large random models on the GPU):
quantising HF Llama-style linear weights in the two formats loom reads, the
quantization_config each format writes, dequantising a checkpoint back to
float weights, and quantising activations the way loom does.

Formats (scheme names used on the command lines):
  fp8-block     HF quant_method "fp8", weight_block_size [128, 128]: weight_scale_inv
                [ceil(N/128), ceil(K/128)], activations dynamic per token and 1x128 group
  fp8-tensor    HF quant_method "fp8", per-tensor weight_scale, static input_scale
  ct-channel    compressed-tensors FP8_DYNAMIC: weight_scale [N, 1], dynamic per-token activations
  ct-tensor     compressed-tensors FP8: weight_scale [1], static input_scale [1], and
                (with kv=True) kv_cache_scheme with self_attn.k_scale / v_scale

Scales are dequantising multipliers (w = fp8 * scale) computed as loom's
quantisers do: scale = max(amax, 1e-12) / 448, q = fp8(x * (1 / scale)).
"""
import math

import torch

E4M3_MAX = 448.0
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SCHEMES = ("fp8-block", "fp8-tensor", "ct-channel", "ct-tensor")
FP8 = torch.float8_e4m3fn


def scale_for_amax(amax):
    return torch.clamp(amax.float(), min=1e-12) / E4M3_MAX


def to_fp8(x, scale):
    """fp8(x * (1 / scale)) with float32 arithmetic, saturating as loom does."""
    inv = 1.0 / scale.float()
    return (x.float() * inv).clamp(-E4M3_MAX, E4M3_MAX).to(FP8)


def is_linear(name):
    return name.endswith(".weight") and name.split(".")[-2] in LINEAR and ".layers." in name


def block_amax(w, bn=128, bk=128):
    n, k = w.shape
    nb, kb = math.ceil(n / bn), math.ceil(k / bk)
    padded = torch.zeros(nb * bn, kb * bk, dtype=torch.float32, device=w.device)
    padded[:n, :k] = w.float().abs()
    return padded.view(nb, bn, kb, bk).amax(dim=(1, 3))


def expand_blocks(s, n, k, bn=128, bk=128):
    return s.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[:n, :k]


def quantize_weight(w, scheme):
    """(fp8 weight, scale tensor as the format stores it) for a float [N, K] weight."""
    n, k = w.shape
    if scheme == "fp8-block":
        s = scale_for_amax(block_amax(w))
        return to_fp8(w, expand_blocks(s, n, k)), s
    if scheme == "ct-channel":
        s = scale_for_amax(w.float().abs().amax(dim=1, keepdim=True))  # [N, 1]
        return to_fp8(w, s), s
    s = scale_for_amax(w.float().abs().max()).reshape(1)
    return to_fp8(w, s), s


def dequantize_weight(q, s):
    """q.float() * scale, the scale broadcast from any stored layout."""
    n, k = q.shape
    s = s.float()
    if s.numel() == 1:
        return q.float() * s.reshape(())
    if s.shape == (n, 1) or s.shape == (n,):
        return q.float() * s.reshape(n, 1)
    return q.float() * expand_blocks(s, n, k)


def scale_name(scheme):
    return "weight_scale_inv" if scheme == "fp8-block" else "weight_scale"


def static_activations(scheme):
    return scheme in ("fp8-tensor", "ct-tensor")


def quantization_config(scheme, kv=False):
    if scheme == "fp8-block":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}
    if scheme == "fp8-tensor":
        return {"quant_method": "fp8", "activation_scheme": "static", "fmt": "e4m3",
                "ignored_layers": ["lm_head"]}
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None, "block_structure": None,
           "actorder": None, "observer_kwargs": {}}
    weights = dict(fp8, strategy="channel" if scheme == "ct-channel" else "tensor", dynamic=False,
                   observer="minmax")
    inputs = dict(fp8, strategy="token", dynamic=True, observer=None) if scheme == "ct-channel" else \
        dict(fp8, strategy="tensor", dynamic=False, observer="minmax")
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": inputs, "output_activations": None}},
            "kv_cache_scheme": dict(fp8, strategy="tensor", dynamic=False, observer="minmax") if kv else None}


def quantize_activation(x, mode, input_scale=None, group=128):
    """x as loom quantises a linear layer's input, dequantised again (float32):
    mode "token" (dynamic per row), "group" (dynamic per row and 128 columns) or
    "static" (input_scale)."""
    x = x.float()
    if mode == "static":
        s = input_scale.float().reshape(())
        return to_fp8(x, s).float() * s
    if mode == "token":
        s = scale_for_amax(x.abs().amax(dim=-1, keepdim=True))
        return to_fp8(x, s).float() * s
    k = x.shape[-1]
    out = torch.empty_like(x)
    for c0 in range(0, k, group):
        part = x[..., c0:c0 + group]
        s = scale_for_amax(part.abs().amax(dim=-1, keepdim=True))
        out[..., c0:c0 + group] = to_fp8(part, s).float() * s
    return out


def activation_mode(scheme):
    return {"fp8-block": "group", "ct-channel": "token"}.get(scheme, "static")


def dequantized_state_dict(tensors, dtype=torch.float32):
    """An HF state dict of plain float weights from an FP8 checkpoint's tensors
    (FP8 linear weights dequantised; scale tensors dropped)."""
    out = {}
    for name, t in tensors.items():
        if name.endswith((".weight_scale", ".weight_scale_inv", ".input_scale", ".k_scale", ".v_scale")):
            continue
        if t.dtype == FP8:
            base = name[: -len(".weight")]
            s = tensors.get(base + ".weight_scale_inv", tensors.get(base + ".weight_scale"))
            out[name] = dequantize_weight(t, s).to(dtype)
        else:
            out[name] = t.to(dtype)
    return out
