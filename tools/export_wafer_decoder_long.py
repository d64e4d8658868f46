#!/usr/bin/python3
"""Export a decoder layer whose cross-attention needs query blocks, as a small wafer test model.

Writes tests/cli/data/wafer_decoder_long.onnx, wafer_decoder_long_tgt.npy,
wafer_decoder_long_memory.npy and wafer_decoder_long_y.npy: the zoo's CausalDecoder
(tools/export_zoo.py: nn.TransformerDecoderLayer(d_model=32, nhead=2, dim_feedforward=64,
batch_first=True) with a causal tgt_mask) over 48 target and 40 memory tokens at batch 1, with the
zoo's weight treatment (noise on the 1-D parameters). Its cross-attention's scores are 48 x 40
(1,920 values per head, more than the 1,024 a chain end's block takes): the wafer runs them in
query blocks (docs/wafer-compiler.md "Cross-attention"). A plain torch.onnx.export at opset 17.

Run with Debian's python3-torch: /usr/bin/python3 tools/export_wafer_decoder_long.py. CI never
runs it; a re-run writes the same bytes.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_zoo  # noqa: E402  (CausalDecoder, perturb, export, write, write_npy)


def main():
    torch.set_num_threads(1)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = os.path.join(root, "tests", "cli", "data")
    torch.manual_seed(31)
    model = export_zoo.perturb(export_zoo.CausalDecoder(32, 2, 64, 48)).eval()
    rs = np.random.RandomState(7)
    tgt = rs.standard_normal((1, 48, 32)).astype(np.float32)
    memory = rs.standard_normal((1, 40, 32)).astype(np.float32)
    y = model(torch.from_numpy(tgt), torch.from_numpy(memory)).detach().numpy()
    export_zoo.check_depends_on_inputs(model, {"tgt": tgt, "memory": memory}, y)
    data, outputs = export_zoo.export(model, (torch.from_numpy(tgt), torch.from_numpy(memory)), ["tgt", "memory"], 17)
    assert len(outputs) == 1, outputs
    export_zoo.write(os.path.join(d, "wafer_decoder_long.onnx"), data)
    export_zoo.write_npy(os.path.join(d, "wafer_decoder_long_tgt.npy"), tgt)
    export_zoo.write_npy(os.path.join(d, "wafer_decoder_long_memory.npy"), memory)
    export_zoo.write_npy(os.path.join(d, "wafer_decoder_long_y.npy"), y.astype(np.float32))
    print(f"output {outputs[0]} {list(y.shape)}, |y| max {np.abs(y).max():.4g}")


if __name__ == "__main__":
    main()
