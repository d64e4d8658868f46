#!/usr/bin/python3
"""Generate tests/data/bf16_vectors.npy: fp32 -> bf16 conversion vectors produced by PyTorch.

The file is an (N, 2) little-endian int32 array: column 0 holds an fp32 input's bit pattern,
column 1 the bf16 bit pattern PyTorch produced for it (zero-extended to 32 bits), as given by
torch.tensor(x).to(torch.bfloat16).view(torch.int16).

tests/unit/test_numeric.cpp ("numeric: bf16 matches PyTorch vectors") checks tessera's
fp32_to_bf16 against it bit for bit (NaN inputs: NaN-ness only). Run with Debian's python3-torch:

    /usr/bin/python3 tools/gen_bf16_vectors.py [output path]

The seed is fixed, so re-running reproduces the committed file.
"""
import os
import sys

import numpy as np
import torch

SEED = 20240611


def bits_to_f32(b):
    return np.asarray(b, dtype=np.uint32).view(np.float32)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "data", "bf16_vectors.npy")
    rng = np.random.default_rng(SEED)
    parts = []

    # 1. Random normals at many scales (1e-44 .. 1e38), both signs.
    for k in range(-44, 39, 2):
        v = rng.standard_normal(96) * (10.0 ** k)
        with np.errstate(over="ignore", under="ignore"):
            parts.append(v.astype(np.float32).view(np.uint32))

    # 2. Uniformly random fp32 bit patterns (includes some NaNs and infinities' neighbours).
    parts.append(rng.integers(0, 2**32, size=3000, dtype=np.uint64).astype(np.uint32))

    # 3. Exact ties: midpoints between adjacent bf16 values (both even and odd lower neighbours),
    #    across the whole finite range including the subnormal range, plus +-1 fp32 ulp around them.
    h = rng.integers(0, 0x7f7f, size=3000, dtype=np.uint64).astype(np.uint32)  # finite, below max
    h |= rng.integers(0, 2, size=h.size, dtype=np.uint64).astype(np.uint32) << 15  # random sign
    mid = (h << 16) | 0x8000
    parts += [mid, mid + 1, mid - 1]
    # ties whose lower neighbour is even / odd, explicitly
    parts.append(((h & ~np.uint32(1)) << 16) | 0x8000)
    parts.append(((h | np.uint32(1)) << 16) | 0x8000)

    # 4. fp32 subnormals (random, and ties within the bf16 subnormal range).
    sub = rng.integers(1, 0x800000, size=1500, dtype=np.uint64).astype(np.uint32)
    parts.append(sub)
    parts.append(sub | np.uint32(0x80000000))
    parts.append((sub & np.uint32(0x7f0000)) | np.uint32(0x8000))

    # 5. Large values near overflow: between bf16 max finite (0x7f7f) and fp32 max.
    big = rng.integers(0x7f700000, 0x7f800000, size=1000, dtype=np.uint64).astype(np.uint32)
    parts += [big, big | np.uint32(0x80000000)]
    # ... and right around the overflow midpoint 0x7f7f8000 (above it rounds to inf).
    edge = rng.integers(0x7f7f0000, 0x7f800000, size=600, dtype=np.uint64).astype(np.uint32)
    parts += [edge, edge | np.uint32(0x80000000)]

    # 6. Boundaries and specials.
    special = [
        0x00000000, 0x80000000,              # +-0
        0x00000001, 0x80000001,              # fp32 min subnormal
        0x00007fff, 0x00008000, 0x00008001,  # around half of bf16 min subnormal
        0x00010000, 0x00017fff, 0x00018000, 0x00018001,  # bf16 min subnormal and its tie
        0x007fffff, 0x007f8000, 0x007f7fff,  # fp32 max subnormal; rounding up to min normal
        0x00800000, 0x00808000, 0x00818000,  # fp32/bf16 min normal and ties
        0x3f800000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001,  # 1.0 and ties near it
        0x7f7f0000, 0x7f7f7fff, 0x7f7f8000, 0x7f7f8001, 0x7f7fffff,  # bf16 max, overflow tie, fp32 max
        0xff7f0000, 0xff7f7fff, 0xff7f8000, 0xff7fffff,
        0x7f800000, 0xff800000,              # +-inf
        0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0x7fffffff, 0xff800001,  # NaNs
    ]
    parts.append(np.array(special, dtype=np.uint32))

    x_bits = np.unique(np.concatenate(parts).astype(np.uint32))  # sorted, deduplicated
    x = bits_to_f32(x_bits)
    y = torch.tensor(x).to(torch.bfloat16).view(torch.int16).numpy()
    y_bits = y.view(np.uint16).astype(np.uint32)

    table = np.stack([x_bits, y_bits], axis=1).view(np.int32)
    table = np.ascontiguousarray(table)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    np.save(out, table)
    print(f"wrote {out}: {table.shape[0]} vectors, {os.path.getsize(out)} bytes (torch {torch.__version__})")


if __name__ == "__main__":
    main()
