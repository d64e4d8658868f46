#!/usr/bin/python3
"""Export the zoo: stock PyTorch / torchvision modules as a plain `torch.onnx.export` writes them.

The zoo is the acceptance test of the compilers: models as users bring them, exported with
`torch.onnx.export(model.eval(), args, f, opset_version=OPSET, input_names=[...])` and nothing
else (constant folding on, the default; no dynamic axes; default output names), unlike
tools/export_models.py, which rewrites the encoder layer's attention to avoid the exporter's
run-time Shape/Slice subgraph. Writes, for each case NAME in CASES:

    scenarios/zoo/NAME/model.onnx        the export (fixed shapes)
    scenarios/zoo/NAME/<input>.npy       inputs (float32 standard normal, numpy seed per case)
    scenarios/zoo/NAME/y.npy             PyTorch's fp32 output for them (eval(), grad enabled)
    scenarios/zoo/NAME/reference.json    target reference, outputs vs PyTorch, rtol/atol 1e-4
    scenarios/zoo/NAME/neuroncore.json   trn1, bf16, outputs vs PyTorch rtol/atol 5e-2, latency 10%

Training cases (`train_*`) export the model's *initial* forward graph the same way, train it in
PyTorch (torch.optim, one batch per step, fp32) and write x.npy / target.npy ([steps, batch,
...]) and losses_OPT.npy (PyTorch's loss per step); their two scenarios train on the reference
target and on the NeuronCore (fp32) and check the losses (rtol 1e-3, atol 1e-6).

Parameters: PyTorch's default initialisation from a fixed seed, then every floating 1-D parameter
and buffer gets N(0, 0.1^2) noise (BatchNorm running variances are scaled by U(0.5, 1.5)
instead): default init leaves biases at 0, norms at weight 1 / bias 0 and BatchNorm at the
identity, which an executor ignoring them would pass (and the exporter merges identical
initializers into Identity nodes). A parameter of more dimensions that the default init leaves all
zeros (ViT's head and class token) gets N(0, 1/fan_in). BatchNorm running statistics are then
measured on four random batches (train mode), as a trained model's are: the default ones let a deep
net's activations grow until every ReLU6 saturates. Every case's output must change when any input
does (checked before export). The module structure is untouched.

Run with Debian's python3-torch (the `python3` on PATH has no torch):

    /usr/bin/python3 tools/export_zoo.py [--out DIR] [--only NAME ...]

CI never runs this; its outputs are committed. Seeds are fixed and torch runs on one thread, so
a re-run reproduces the committed files byte for byte. scenarios/zoo/README.md lists the cases.
"""
import argparse
import collections
import copy
import io
import json
import math
import os
import sys

import numpy as np
import onnx
import torch
import torchvision
from torch import nn
from torch.nn import functional as F
from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf
from torchvision.models.regnet import BlockParams, RegNet
from torchvision.models.resnet import BasicBlock, ResNet

GENERATOR = "tools/export_zoo.py"
REFERENCE_TOL = (1e-4, 1e-4)      # (rtol, atol) vs PyTorch on the reference target
NEURONCORE_TOL = (5e-2, 1e-3)     # bf16 on the NeuronCore: rtol, and the floor of atol (raised per case: export_case)
NEURONCORE_FP32_TOL = (1e-3, 1e-4)  # fp32 on the NeuronCore
LOSS_TOL = (1e-3, 1e-6)           # training: the loss of every step
MIXED_LOSS_TOL = (1e-2, 1e-3)     # mixed-precision training (16-bit compute) against PyTorch's fp32 losses


# ---------------------------------------------------------------------------------------------
# Hand-written modules, as PyTorch users write them (nanoGPT, LLaMA reference code).


class GPT2Block(nn.Module):
    """nanoGPT's Block: pre-norm, causal self-attention masked by a registered lower-triangular
    buffer (masked_fill -inf), GELU tanh MLP."""

    def __init__(self, d, heads, block_size):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU(approximate="tanh")
        self.mlp_proj = nn.Linear(4 * d, d)

    def attn(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))


class CausalDecoder(nn.Module):
    """nn.TransformerDecoderLayer with a causal tgt_mask kept as a buffer."""

    def __init__(self, d, heads, ff, seq):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d, heads, ff, batch_first=True)
        self.register_buffer("tgt_mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, tgt, memory):
        return self.layer(tgt, memory, tgt_mask=self.tgt_mask)


class CausalEncoder(nn.Module):
    """nn.TransformerEncoderLayer with a causal src_mask kept as a buffer (an additive -inf mask)."""

    def __init__(self, d, heads, ff, seq):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, batch_first=True)
        self.register_buffer("src_mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, x):
        return self.layer(x, src_mask=self.src_mask)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    """A LLaMA decoder block: RMSNorm, rotary embeddings (cos/sin buffers, rotate_half), causal
    attention with an additive -inf mask buffer, SwiGLU MLP (no biases)."""

    def __init__(self, d, heads, hidden, max_seq, theta=10000.0):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.attention_norm = RMSNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.ffn_norm = RMSNorm(d)
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.dh, 2).float() / self.dh))
        freqs = torch.outer(torch.arange(max_seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())
        self.register_buffer("mask", torch.full((max_seq, max_seq), float("-inf")).triu(1))

    def attention(self, x):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.heads, self.dh).transpose(1, 2)
        k = self.wk(x).view(B, T, self.heads, self.dh).transpose(1, 2)
        v = self.wv(x).view(B, T, self.heads, self.dh).transpose(1, 2)
        cos, sin = self.cos_cached[:T], self.sin_cached[:T]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(2, 3) / math.sqrt(self.dh) + self.mask[:T, :T]
        out = F.softmax(scores.float(), dim=-1).type_as(q) @ v
        return self.wo(out.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        y = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class LlamaFFN(nn.Module):
    """LLaMA's feed-forward half-block: x + w2(silu(w1(RMSNorm(x))) * w3(RMSNorm(x)))."""

    def __init__(self, d, hidden):
        super().__init__()
        self.ffn_norm = RMSNorm(d)
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)

    def forward(self, x):
        y = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


def audio_net(batch_norm, classes):
    """Conv1d keyword-spotting style classifier: Conv1d (+ BatchNorm1d) + ReLU stacks, a strided
    conv, AdaptiveAvgPool1d(1), Linear."""
    def block(cin, cout, k, stride):
        layers = [nn.Conv1d(cin, cout, k, stride=stride, padding=k // 2)]
        if batch_norm:
            layers.append(nn.BatchNorm1d(cout))
        return layers + [nn.ReLU()]
    return nn.Sequential(*block(1, 16, 9, 1), *block(16, 32, 5, 2), *block(32, 32, 3, 1),
                         nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, classes))


class RecurrentClassifier(nn.Module):
    """nn.LSTM / nn.GRU (batch_first), the last layer's final hidden state -> Linear."""

    def __init__(self, cell, num_layers):
        super().__init__()
        self.rnn = cell(16, 32, num_layers=num_layers, batch_first=True)
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        _, h = self.rnn(x)
        if isinstance(h, tuple):  # LSTM: (h_n, c_n)
            h = h[0]
        return self.fc(h[-1])


def efficientnet_b0_narrow():
    settings, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=0.25,
                                                depth_mult=0.25)
    return EfficientNet(settings, 0.2, last_channel=last_channel, num_classes=10)


def regnet_y_tiny():
    params = BlockParams.from_init_params(depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8,
                                          se_ratio=0.25)
    return RegNet(params, num_classes=10)


def vit_tiny():
    return torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                                num_heads=2, hidden_dim=64, mlp_dim=128,
                                                num_classes=10)


# ---------------------------------------------------------------------------------------------
# Cases. inputs: name -> shape (float32 standard normal). "ops" is for the README.

CASES = [
    dict(name="resnet_basic_1111", seed=11, opset=13, inputs={"x": (2, 3, 32, 32)},
         build=lambda: ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10),
         source="torchvision.models.resnet.ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10)",
         what="ResNet with one BasicBlock per stage (resnet18's stem and widths 64-512; "
              "torchvision has no narrower BasicBlock ResNet)", wafer=("weight_streaming",)),
    dict(name="mobilenet_v2", seed=12, opset=11, inputs={"x": (1, 3, 64, 64)},
         build=lambda: torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=10),
         source="torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=10)",
         what="MobileNetV2 at width 0.35", wafer=("weight_streaming",), wafer_rect=(32, 32)),
    dict(name="mobilenet_v3_small", seed=13, opset=17, inputs={"x": (8, 3, 64, 64)},
         build=lambda: torchvision.models.mobilenet_v3_small(width_mult=0.5, num_classes=10),
         source="torchvision.models.mobilenet_v3_small(width_mult=0.5, num_classes=10)",
         what="MobileNetV3-small at width 0.5", wafer=("weight_streaming",),
         wafer_note=" Its batch of 8 needs 178 KB per PE at once, more than a PE's SRAM on any rectangle: "
                    "mapping.micro_batch auto runs it as 8 micro-batches of one sample (docs/wafer-compiler.md "
                    "\"Micro-batches\")."),
    dict(name="efficientnet_b0", seed=14, opset=13, inputs={"x": (1, 3, 32, 32)},
         build=efficientnet_b0_narrow,
         source="torchvision EfficientNet(*_efficientnet_conf('efficientnet_b0', "
                "width_mult=0.25, depth_mult=0.25), num_classes=10)",
         what="EfficientNet-B0 scaled to width 0.25 and depth 0.25 by torchvision's own "
              "config builder", wafer=("weight_streaming",)),
    dict(name="regnet_y", seed=15, opset=17, inputs={"x": (2, 3, 32, 32)},
         build=regnet_y_tiny,
         source="torchvision RegNet(BlockParams.from_init_params(depth=4, w_0=16, w_a=8, "
                "w_m=2, group_width=8, se_ratio=0.25), num_classes=10)",
         what="a 4-block RegNetY (grouped convs, squeeze-excitation)", wafer=("weight_streaming",)),
    dict(name="squeezenet1_1", seed=28, opset=13, inputs={"x": (1, 3, 64, 64)},
         build=lambda: torchvision.models.squeezenet1_1(num_classes=10),
         source="torchvision.models.squeezenet1_1(num_classes=10)",
         what="SqueezeNet 1.1 (Fire modules: a squeeze Conv, two expand Convs concatenated)",
         wafer=("weight_streaming",)),
    dict(name="vit_tiny", seed=16, opset=13, inputs={"x": (8, 3, 32, 32)},
         build=vit_tiny,
         source="torchvision.models.VisionTransformer(image_size=32, patch_size=8, "
                "num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10)",
         what="a 2-layer Vision Transformer", wafer=("weight_streaming",), wafer_rect=(64, 64)),
    dict(name="vit_tiny_opset17", seed=16, opset=17, inputs={"x": (1, 3, 32, 32)},
         build=vit_tiny,
         source="torchvision.models.VisionTransformer(image_size=32, patch_size=8, "
                "num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=10)",
         what="the same 2-layer Vision Transformer (LayerNormalization at opset 17)",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="encoder_postnorm", seed=17, opset=13, inputs={"x": (1, 16, 64)},
         build=lambda: nn.TransformerEncoderLayer(64, 4, 128, batch_first=True),
         source="torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
                "batch_first=True)",
         what="a post-norm transformer encoder layer (ReLU, stock packed-QKV attention)",
         wafer=("weight_streaming", "pipelined"), wafer_precisions=("fp16", "bf16", "fp32")),
    dict(name="encoder_postnorm_b2", seed=17, opset=13, inputs={"x": (2, 16, 64)},
         build=lambda: nn.TransformerEncoderLayer(64, 4, 128, batch_first=True),
         source="torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
                "batch_first=True)",
         what="the post-norm transformer encoder layer at batch 2 (the export transposes to "
              "[seq, batch, d] and attends per batch x head)",
         wafer=("weight_streaming", "pipelined"), wafer_precisions=("fp16", "bf16", "fp32")),
    dict(name="encoder_causal", seed=25, opset=13, inputs={"x": (2, 16, 64)},
         build=lambda: CausalEncoder(64, 4, 128, 16),
         source="torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
                "batch_first=True) called with src_mask=nn.Transformer.generate_square_subsequent_mask(16)",
         what="a post-norm encoder layer with a causal mask (an additive -inf mask on the scores), batch 2",
         wafer=("weight_streaming", "pipelined"), wafer_precisions=("fp16", "bf16", "fp32")),
    dict(name="encoder_prenorm", seed=18, opset=17, inputs={"x": (2, 16, 64)},
         build=lambda: nn.TransformerEncoderLayer(64, 4, 128, batch_first=True,
                                                  norm_first=True),
         source="torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
                "batch_first=True, norm_first=True)",
         what="a pre-norm transformer encoder layer",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="encoder2_postnorm", seed=26, opset=13, inputs={"x": (2, 16, 64)},
         build=lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True),
                                             num_layers=2),
         source="torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, "
                "dim_feedforward=128, batch_first=True), num_layers=2)",
         what="a stack of two post-norm encoder layers (the stock nn.TransformerEncoder), batch 2",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="gpt2_block", seed=19, opset=13, inputs={"x": (2, 32, 64)},
         build=lambda: GPT2Block(64, 4, 64),
         source="a nanoGPT-style Block (tools/export_zoo.py GPT2Block: d 64, 4 heads, "
                "block_size 64)",
         what="a GPT-2 block (LayerNorm, causal attention by masked_fill of a tril buffer, "
              "GELU tanh)",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="decoder_causal", seed=20, opset=17, inputs={"tgt": (1, 16, 64),
                                                            "memory": (1, 24, 64)},
         build=lambda: CausalDecoder(64, 4, 128, 16),
         source="torch.nn.TransformerDecoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
                "batch_first=True) with tgt_mask=nn.Transformer.generate_square_subsequent_"
                "mask(16)",
         what="a transformer decoder layer with a causal self-attention mask and "
              "cross-attention",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="decoder_causal_b2", seed=20, opset=17, inputs={"tgt": (2, 16, 64),
                                                               "memory": (2, 24, 64)},
         build=lambda: CausalDecoder(64, 4, 128, 16),
         source="torch.nn.TransformerDecoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
                "batch_first=True) with tgt_mask=nn.Transformer.generate_square_subsequent_"
                "mask(16)",
         what="the decoder layer at batch 2 (the export transposes target and memory to "
              "[seq, batch, d] and attends per batch x head)",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="llama_block", seed=21, opset=17, inputs={"x": (2, 32, 64)},
         build=lambda: LlamaBlock(64, 4, 176, 64),
         source="a LLaMA-style block (tools/export_zoo.py LlamaBlock: d 64, 4 heads, "
                "SwiGLU hidden 176, max_seq 64)",
         what="a LLaMA block (RMSNorm, rotary embeddings, causal attention, SwiGLU)",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="llama_block_s16", seed=27, opset=17, inputs={"x": (2, 16, 64)},
         build=lambda: LlamaBlock(64, 4, 64, 16),
         source="the LLaMA-style block of llama_block at SwiGLU hidden 64 and max_seq 16 "
                "(tools/export_zoo.py LlamaBlock(64, 4, 64, 16))",
         what="a smaller LLaMA block (RMSNorm, rotary embeddings, additive causal mask, SwiGLU): "
              "the size whose heads-whole rectangle fits the wafer's PE SRAM",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="llama_ffn", seed=26, opset=17, inputs={"x": (2, 32, 64)},
         build=lambda: LlamaFFN(64, 176),
         source="LLaMA's feed-forward half-block (tools/export_zoo.py LlamaFFN: RMSNorm, SwiGLU "
                "hidden 176, no biases, the residual)",
         what="RMSNorm and a SwiGLU gate (silu(w1 x) * w3 x)",
         wafer=("weight_streaming",), wafer_precisions={"weight_streaming": ("fp16", "bf16", "fp32")}),
    dict(name="audio_conv1d", seed=22, opset=11, inputs={"x": (8, 1, 512)},
         build=lambda: audio_net(batch_norm=True, classes=10), wafer=("weight_streaming", "pipelined"),
         source="nn.Sequential of Conv1d+BatchNorm1d+ReLU x3 (one stride 2), "
                "AdaptiveAvgPool1d(1), Flatten, Linear(32, 10)",
         what="a Conv1d audio classifier on 512 samples"),
    dict(name="lstm_classifier", seed=23, opset=13, inputs={"x": (2, 24, 16)},
         build=lambda: RecurrentClassifier(nn.LSTM, 1),
         source="torch.nn.LSTM(16, 32, batch_first=True), last hidden state -> Linear(32, 5)",
         what="an LSTM sequence classifier",
         wafer=("weight_streaming", "pipelined"), wafer_precisions=("fp16", "bf16", "fp32")),
    dict(name="gru_classifier", seed=24, opset=11, inputs={"x": (8, 24, 16)},
         build=lambda: RecurrentClassifier(nn.GRU, 2),
         source="torch.nn.GRU(16, 32, num_layers=2, batch_first=True), last hidden state -> "
                "Linear(32, 5)",
         what="a 2-layer GRU sequence classifier",
         wafer=("weight_streaming", "pipelined"), wafer_precisions=("fp16", "bf16", "fp32")),
]


# Training cases: the initial forward graph, PyTorch's losses. data(rng, steps) -> (x, target).

def regression_data(rng, steps, batch):
    a = rng.normal(size=(8, 4)).astype(np.float32)
    x = rng.normal(size=(steps, batch, 8)).astype(np.float32)
    t = (np.tanh(x @ a) + 0.05 * rng.normal(size=(steps, batch, 4))).astype(np.float32)
    return x, t


def tone_data(rng, steps, batch):
    """512-sample clips: one of four tones (random phase and gain) plus noise; one-hot labels."""
    labels = rng.integers(0, 4, size=(steps, batch))
    freq = np.array([4.0, 9.0, 17.0, 31.0])[labels][..., None]
    phase = rng.uniform(0, 2 * np.pi, size=(steps, batch, 1))
    gain = rng.uniform(0.5, 1.5, size=(steps, batch, 1))
    n = np.arange(512) / 512.0
    x = gain * np.sin(2 * np.pi * freq * n + phase) + 0.3 * rng.normal(size=(steps, batch, 512))
    return x[:, :, None, :].astype(np.float32), np.eye(4, dtype=np.float32)[labels]


def sequence_data(rng, steps, batch):
    """[batch, 16, 64] sequences; the target is a fixed random mixing of each token and its
    predecessor, squashed (something an encoder layer can fit)."""
    a = rng.normal(scale=0.15, size=(64, 64)).astype(np.float32)
    x = rng.normal(size=(steps, batch, 16, 64)).astype(np.float32)
    prev = np.concatenate([np.zeros_like(x[:, :, :1]), x[:, :, :-1]], axis=2)
    return x, np.tanh((x + 0.5 * prev) @ a).astype(np.float32)


TRAIN_CASES = [
    dict(name="train_mlp_sgd", seed=31, opset=17, batch=8, steps=20, shape=(8,),
         build=lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
         data=regression_data, loss="mse", opt="sgd", lr=0.2,
         source="nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))",
         what="an MLP regression trained with SGD", wafer=True),
    dict(name="train_conv1d_sgd", seed=32, opset=13, batch=8, steps=10, shape=(1, 512),
         build=lambda: audio_net(batch_norm=False, classes=4),
         data=tone_data, loss="softmax_cross_entropy", opt="sgd", lr=0.2,
         source="nn.Sequential of Conv1d+ReLU x3 (one stride 2), AdaptiveAvgPool1d(1), "
                "Flatten, Linear(32, 4)",
         what="the Conv1d audio classifier without BatchNorm, trained with SGD on 4 tones",
         # (the wafer: 8 micro-batches of one sample on 32 x 32 PEs, fp32's saved rows do not fit
         # a PE; about 55 s a simulated step here, so the scenarios run the first 2 of the 10)
         wafer=True, wafer_precisions=("fp16", "bf16"), wafer_steps=2, wafer_rect=(32, 32)),
    dict(name="train_encoder_sgd", seed=33, opset=17, batch=2, steps=10, shape=(16, 64),
         build=lambda: nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True),
         data=sequence_data, loss="mse", opt="sgd", lr=0.2,
         source="torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, "
                "dropout=0.0, batch_first=True)",
         what="a post-norm transformer encoder layer trained with SGD on a sequence regression",
         wafer=True),
]


# ---------------------------------------------------------------------------------------------


def perturb(model):
    """Noise on every floating 1-D parameter and buffer, and on every floating parameter the
    default initialisation leaves all zeros (see the module docstring)."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point():
                continue
            if t.dim() != 1:
                # torchvision zero-initialises ViT's head and class token: a zero head makes the
                # output the head's bias whatever the input, a test that cannot fail.
                if t.numel() and not t.any():
                    fan_in = t.shape[-1] if t.dim() > 1 else 1
                    t.add_(torch.randn_like(t) / fan_in ** 0.5)
                continue
            if name.endswith("running_var"):
                t.mul_(torch.empty_like(t).uniform_(0.5, 1.5))
            else:
                t.add_(0.1 * torch.randn_like(t))
    return model


def calibrate_batchnorm(model, inputs, seed):
    """BatchNorm running statistics measured on random batches (train mode, cumulative average),
    as a trained model's are: with the default statistics (mean 0, variance 1) the activations of
    a deep net grow layer by layer until every ReLU6 and hardswish saturates, and the output no
    longer depends on the input (MobileNetV2/V3 and EfficientNet did)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return model
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    rs = np.random.RandomState(2000 + seed)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(*[torch.from_numpy(rs.standard_normal((max(8, s[0]),) + tuple(s[1:])).astype(np.float32))
                    for s in inputs.values()])
    for m in bns:
        m.momentum = 0.1
    return model.eval()


def check_depends_on_inputs(model, feeds, y):
    """Every input must change the output: a model whose output ignores its input makes a test
    that passes whatever the executor does with it."""
    for k in feeds:
        moved = {n: torch.from_numpy(v + (0.5 if n == k else 0.0)) for n, v in feeds.items()}
        y2 = model(*moved.values()).detach().numpy()
        change = float(np.abs(y2 - y).max())
        assert change > 1e-3 * max(1.0, float(np.abs(y).max())), \
            f"the output does not depend on input {k} (max change {change:.3g})"


def export(model, args, input_names, opset, symbolic_ok=False):
    """The plain export: only the opset and the input names are given. symbolic_ok: an output whose
    shape ONNX's shape inference leaves symbolic is kept (PyTorch 1.13 writes nn.ZeroPad2d's pads as
    a Shape-free but run-time subgraph, ConstantOfShape .. Cast, that onnx does not fold)."""
    buf = io.BytesIO()
    torch.onnx.export(model.eval(), args, buf, opset_version=opset, input_names=input_names)
    data = buf.getvalue()
    onnx_model = onnx.load_from_string(data)
    onnx.checker.check_model(onnx_model, full_check=True)  # strict shape inference too
    hist = collections.Counter(n.op_type for n in onnx_model.graph.node)
    print("  ops: " + ", ".join(f"{k} {v}" for k, v in sorted(hist.items())))
    for v in list(onnx_model.graph.input) + list(onnx_model.graph.output):
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in v.type.tensor_type.shape.dim]
        if not all(isinstance(d, int) and d > 0 for d in dims) and not (symbolic_ok and v in onnx_model.graph.output):
            raise SystemExit(f"{v.name} has a non-fixed shape {dims}")
    return data, [o.name for o in onnx_model.graph.output]


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    print(f"  wrote {path} ({len(data)} bytes)")


def write_npy(path, array):
    b = io.BytesIO()
    np.save(b, np.ascontiguousarray(array))
    write(path, b.getvalue())


def write_json(path, obj):
    write(path, (json.dumps(obj, indent=2) + "\n").encode())


def describe(case, batch):
    return (f"{case['what']}: {case['source']}; torch.onnx.export defaults, opset "
            f"{case['opset']}, batch {batch}, fixed shapes ({GENERATOR}, PyTorch 1.13 / "
            f"torchvision 0.14).")


def export_case(case, root):
    name, d = case["name"], os.path.join(root, "scenarios", "zoo", case["name"])
    torch.manual_seed(case["seed"])
    model = calibrate_batchnorm(perturb(case["build"]()), case["inputs"], case["seed"]).eval()
    rs = np.random.RandomState(1000 + case["seed"])
    feeds = {k: rs.standard_normal(s).astype(np.float32) for k, s in case["inputs"].items()}
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    y = model(*args).detach().numpy()  # grad enabled: the path the exporter traces
    with torch.no_grad():              # eval + no_grad may take a fused fast path
        fast = model(*args).numpy()
    print(f"  y {list(y.shape)}: |y| max {np.abs(y).max():.4g}; no_grad path max |diff| "
          f"{np.abs(fast - y).max():.3g}")
    check_depends_on_inputs(model, feeds, y)
    data, outputs = export(model, args, list(feeds), case["opset"])
    assert len(outputs) == 1, outputs
    write(os.path.join(d, "model.onnx"), data)
    for k, v in feeds.items():
        write_npy(os.path.join(d, k + ".npy"), v)
    write_npy(os.path.join(d, "y.npy"), y.astype(np.float32))
    batch = next(iter(case["inputs"].values()))[0]
    # bf16 on the machine can be no closer to PyTorch's fp32 than PyTorch's own bf16 inference is:
    # its error, doubled, is the bf16 scenario's atol when that is more than NEURONCORE_TOL's.
    with torch.no_grad():
        yb = copy.deepcopy(model).to(torch.bfloat16)(*[a.to(torch.bfloat16) for a in args]).float().numpy()
    bf16_err = float(np.abs(yb - y).max())
    bf16_atol = max(NEURONCORE_TOL[1], float(f"{2 * bf16_err:.2g}"))
    print(f"  PyTorch's own bf16 inference: max abs err {bf16_err:.3g} -> bf16 atol {bf16_atol:g}")
    variants = (("reference", "reference", None, REFERENCE_TOL),
                ("neuroncore", "neuroncore", "bf16", (NEURONCORE_TOL[0], bf16_atol)),
                ("neuroncore_fp32", "neuroncore", "fp32", NEURONCORE_FP32_TOL))
    # The wafer (wse2) in fp16 and bf16 where its compiler maps the model, in the modes it maps it in
    # (case["wafer"]: weight streaming writes wafer_<p>.json, pipelined wafer_pipelined_<p>.json);
    # held to the bf16 tolerance (PyTorch 1.13 has no fp16 convolution on the CPU to measure an
    # fp16 figure; fp16 rounds finer, so the bound is the looser one). wafer_precisions lists other
    # precisions, for all modes or per mode ("fp32": the fp32 tolerance).
    modes = {}
    for mode in case.get("wafer", ()):
        precisions = case.get("wafer_precisions", ("fp16", "bf16"))
        if isinstance(precisions, dict):  # per mode
            precisions = precisions.get(mode, ("fp16", "bf16"))
        for p in precisions:
            file = "wafer_" + ("pipelined_" if mode == "pipelined" else "") + p
            modes[file] = mode
            variants += ((file, "wafer", p, NEURONCORE_FP32_TOL if p == "fp32" else (NEURONCORE_TOL[0], bf16_atol)),)
    for file, target, compute, tol in variants:
        desc = describe(case, batch)
        if target == "wafer" and compute == "fp32":
            desc += (f" On a WSE-2, {modes[file].replace('_', ' ')}, fp32 compute: the compiled "
                     "layout against PyTorch to fp32 rounding.")
        elif target == "wafer":
            desc += (f" On a WSE-2, {modes[file].replace('_', ' ')}, {compute} compute with fp32 "
                     f"sums: atol {bf16_atol:g}, twice PyTorch's own bf16 inference error "
                     f"({bf16_err:.3g}) when that is more than {NEURONCORE_TOL[1]:g}.")
            desc += case.get("wafer_note", "")
            if "wafer_rect" in case:
                w, h = case["wafer_rect"]
                desc += (f" On {w} x {h} PEs (mapping.wafer_rect) so that it simulates in CI time; without it "
                         "the compiler takes the rectangle its widest layer wants (docs/wafer-compiler.md).")
        elif compute == "bf16":
            desc += (f" bf16: atol {bf16_atol:g}, twice PyTorch's own bf16 inference error "
                     f"({bf16_err:.3g}) when that is more than {NEURONCORE_TOL[1]:g}.")
        if compute == "fp32" and target != "wafer":
            desc += (" fp32 on the machine: the compiled program against PyTorch to fp32 rounding "
                     "(the compiler's numerics, apart from bf16's); the latency is the bf16 "
                     "scenario's to check.")
        scenario = {
            "schema": "tessera.scenario/1",
            "name": f"zoo-{name.replace('_', '-')}-{file.replace('_', '-')}",
            "description": desc,
            "target": {"kind": target} if target == "reference"
                      else {"kind": target, "preset": "wse2" if target == "wafer" else "trn1"},
            "model": {"onnx": "model.onnx"},
            "inputs": {k: {"file": k + ".npy"} for k in feeds},
        }
        if target == "wafer":
            scenario["mapping"] = {"mode": modes[file]}
            if "wafer_rect" in case:  # a smaller rectangle than the default, to simulate in CI time
                scenario["mapping"]["wafer_rect"] = list(case["wafer_rect"])
        if compute:
            scenario["precision"] = {"compute": compute}
        scenario["expect"] = {"outputs": {outputs[0]: {"file": "y.npy", "rtol": tol[0],
                                                       "atol": tol[1]}}}
        if compute == "bf16" or target == "wafer":  # the NeuronCore estimate replays the schedule (5%); the wafer's is analytical (10%)
            scenario["expect"]["latency_error_pct"] = 10 if target == "wafer" else 5
        write_json(os.path.join(d, file + ".json"), scenario)


def train(model, x, t, loss_kind, opt_kind, lr):
    assert opt_kind == "sgd"
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for k in range(len(x)):
        opt.zero_grad()
        y = model(torch.from_numpy(x[k]))
        tk = torch.from_numpy(t[k])
        if loss_kind == "mse":
            loss = F.mse_loss(y, tk)
        else:
            loss = F.cross_entropy(y, tk.argmax(dim=1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses, dtype=np.float32)


def export_train_case(case, root):
    name, d = case["name"], os.path.join(root, "scenarios", "zoo", case["name"])
    x, t = case["data"](np.random.default_rng(2000 + case["seed"]), case["steps"], case["batch"])
    torch.manual_seed(case["seed"])
    model = perturb(case["build"]())
    data, outputs = export(model, (torch.from_numpy(x[0]),), ["x"], case["opset"])
    assert len(outputs) == 1, outputs
    losses = train(model.train(), x, t, case["loss"], case["opt"], case["lr"])
    print(f"  losses {losses[0]:.4f} -> {losses[-1]:.4f}")
    write(os.path.join(d, "model.onnx"), data)
    write_npy(os.path.join(d, "x.npy"), x)
    write_npy(os.path.join(d, "target.npy"), t)
    loss_file = f"losses_{case['opt']}.npy"
    write_npy(os.path.join(d, loss_file), losses)
    desc = (f"Train {case['what']} ({case['loss']}, {case['opt']} lr {case['lr']}) for "
            f"{case['steps']} steps, one batch of {case['batch']} per step; PyTorch's loss per "
            f"step is the expectation. The initial forward graph: {case['source']}; "
            f"torch.onnx.export defaults, opset {case['opset']}, batch {case['batch']} "
            f"({GENERATOR}, PyTorch 1.13).")
    # The wafer (wse2, weight streaming) where its compiler trains the model: fp32, and mixed
    # precision in fp16 and bf16 (16-bit weights, activations and dy; fp32 sums and masters).
    targets = [("reference", None), ("neuroncore", None)]
    if case.get("wafer"):
        targets += [("wafer", p) for p in case.get("wafer_precisions", ("fp32", "fp16", "bf16"))]
    for target, wprec in targets:
        scenario = {
            "schema": "tessera.scenario/1",
            "name": f"zoo-{name.replace('_', '-')}-{target}",
            "description": desc,
            "target": {"kind": target} if target == "reference"
                      else {"kind": target, "preset": "wse2" if target == "wafer" else "trn1"},
            "model": {"onnx": "model.onnx"},
            "inputs": {"x": {"file": "x.npy"}, "target": {"file": "target.npy"}},
            "run": {"steps": case["steps"], "checkpoint_steps": 10, "activation_steps": 5},
            "training": {"loss": case["loss"],
                         "optimizer": {"kind": case["opt"], "learning_rate": case["lr"]}},
            "step_closures": [{"kind": "log", "tensors": ["loss"]},
                              {"kind": "assert", "condition": "finite(loss)"}],
            "expect": {"losses": {"file": loss_file, "rtol": LOSS_TOL[0],
                                  "atol": LOSS_TOL[1]}},
        }
        if target != "reference":
            scenario["precision"] = {"compute": wprec or "fp32"}
        if target == "wafer":
            scenario["name"] += "-" + wprec
            if wprec == "fp32":
                scenario["description"] += (" On a WSE-2, weight streaming, fp32: MemoryX keeps the fp32 masters and "
                                             "applies SGD, the PEs run the forward and backward passes.")
            else:
                scenario["description"] += (f" On a WSE-2, weight streaming, mixed precision in {wprec}: MemoryX keeps "
                                             f"the fp32 masters and applies SGD; the PEs take the weights, x and dy in "
                                             f"{wprec} and sum in fp32. PyTorch's fp32 losses within a stated "
                                             f"{MIXED_LOSS_TOL[0]:g} relative ({MIXED_LOSS_TOL[1]:g} absolute) "
                                             f"tolerance.")
                scenario["expect"]["losses"].update(rtol=MIXED_LOSS_TOL[0], atol=MIXED_LOSS_TOL[1])
            scenario["mapping"] = {"mode": "weight_streaming"}
            if case.get("wafer_rect"):
                scenario["mapping"]["wafer_rect"] = list(case["wafer_rect"])
            if case.get("wafer_steps"):  # (the data's first steps: a shorter run of the same training)
                scenario["run"] = {"steps": case["wafer_steps"], "checkpoint_steps": case["wafer_steps"], "activation_steps": 1}
                scenario["description"] += (f" The first {case['wafer_steps']} of the {case['steps']} steps (run.steps: the "
                                             f"simulation takes about a minute a step on a 2-core machine; set run.steps "
                                             f"to {case['steps']} for all).")
            if name == "train_encoder_sgd":
                scenario["description"] += (" Q, K and V are the in-projection's column slices, the attention runs at "
                                             "V's chain ends with each head split over PEs; its backward there (dV, dP "
                                             "summed along each head's PEs, the softmax's dS, dQ, dK), both LayerNorms' "
                                             "backward along the chain ends, the residuals' gradients, the scales and "
                                             "shifts trained at the chain ends (docs/wafer-compiler.md \"Training\").")
            if name == "train_conv1d_sgd":
                scenario["description"] += (" Each step runs as 8 micro-batches of one sample (mapping.micro_batch auto: "
                                             "the batch's saved im2col rows do not fit a PE at once; MemoryX sums the "
                                             "runs' weight gradients), the Convs' input gradients by col2im at the "
                                             "chain ends of the Conv before (docs/wafer-compiler.md \"Training\"); in "
                                             "fp32 one sample does not fit.")
            scenario["expect"]["latency_error_pct"] = 10
        write_json(os.path.join(d, target + (f"_{wprec}" if target == "wafer" else "") + ".json"), scenario)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   help="repository root to write under (default: this checkout)")
    p.add_argument("--only", nargs="*", help="export only these cases")
    args = p.parse_args()
    torch.set_num_threads(1)  # a fixed reduction order: reproducible outputs
    for case in CASES + TRAIN_CASES:
        if args.only and case["name"] not in args.only:
            continue
        print(f"{case['name']}:")
        (export_train_case if "data" in case else export_case)(case, args.out)


if __name__ == "__main__":
    sys.exit(main())
