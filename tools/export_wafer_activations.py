#!/usr/bin/python3
"""Export nineteen small wafer test models written as users write torch.nn models.

Writes tests/cli/data/wafer_activations_mlp.onnx, wafer_activations_mlp_x.npy and
wafer_activations_mlp_y.npy: nn.Sequential(Linear(16, 32), ELU(), Linear(32, 32), SELU(),
Linear(32, 24), CELU(0.5), Linear(24, 24), Mish(), Linear(24, 16), Softplus(), Linear(16, 7),
LogSoftmax(dim=1)) at batch 3 -- torch.nn modules as a user writes them, a plain torch.onnx.export at
opset 13 (input "x"; the output keeps its default name), so the file has Elu, Selu, Celu, Mish
written out (Softplus, Tanh, Mul), Softplus and a final LogSoftmax. The wafer tests run it in
weight streaming mode with the rectangle left to the compiler (a final LogSoftmax needs the last
layer's outputs on one PE) and pipelined.

And tests/cli/data/wafer_mean_bn_cnn.onnx, wafer_mean_bn_cnn_x.npy and wafer_mean_bn_cnn_y.npy:
Conv2d, ReLU, MaxPool2d(3, 2, ceil_mode=True), a strided Conv2d of dilation 2, PReLU(12) (a slope per channel), the spatial mean x.mean((2, 3)) in
the forward (a ReduceMean, as MNASNet's and ShuffleNet's heads), Linear, BatchNorm1d with running
statistics of its own (a per-feature Mul and Add after the Linear), PReLU (one slope), Linear -- at batch 2,
opset 13.

And tests/cli/data/wafer_two_value_mlp.onnx, _x.npy, _y.npy: Linear(16, 32), Softsign, Linear(32, 32),
Tanhshrink, Linear(32, 24), QuickGELU (x * sigmoid(1.702 x), CLIP's, written in the forward),
Linear(24, 8) at batch 4, opset 13 -- functions the export writes as ops of two values of one
chain end (Div(x, Add(Abs(x), 1)), Sub(x, Tanh(x)), Mul(x, Sigmoid(Mul(x, 1.702)))), which no
single ONNX op or canonical fusion covers.

And tests/cli/data/wafer_groupnorm_cnn.onnx, _x.npy, _y.npy: Conv2d(3, 8, 3, padding=1), GroupNorm(2, 8),
ReLU, Conv2d(8, 12, 3, stride=2, padding=1), InstanceNorm2d(12, affine=True), SiLU,
AdaptiveAvgPool2d(1), Flatten, Linear(12, 4) at batch 2, opset 13 -- GroupNorm exported as Reshape,
InstanceNormalization, Reshape, Mul, Add; InstanceNorm2d as one InstanceNormalization with its
scale and bias -- with affine parameters drawn away from the identity.

And tests/cli/data/wafer_convtranspose_cnn.onnx, _x.npy, _y.npy: an autoencoder's shape -- Conv2d(3, 8, 3,
stride=2, padding=1), ReLU, ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1), ReLU,
ConvTranspose2d(6, 4, 4, stride=2, padding=1) -- at batch 2 on 8 x 8, the output the last
ConvTranspose's [2, 4, 16, 16]; and wafer_convtranspose1d.onnx, _x.npy, _y.npy: ConvTranspose1d(4, 8, 3,
stride=2, padding=1, output_padding=1) on the graph input [2, 4, 6], ReLU, Conv1d(8, 4, 3, padding=1),
Flatten, Linear(48, 3). Opset 13. And wafer_autoencoder.onnx, _x.npy, _y.npy: Conv2d(3, 8, 3, stride=2, padding=1),
ReLU, ConvTranspose2d(8, 3, 4, stride=2, padding=1), Sigmoid at batch 2 on 16 x 16 (the probe's
autoencoder): in fp16 on one PE its arrays, packed, need 304 bytes more than a PE has, which the
rectangle search does not see.

And wafer_upsample_cnn.onnx, _x.npy, _y.npy: a decoder's shape -- Conv2d(3, 8, 3, padding=1), ReLU, Upsample(2),
Conv2d(8, 6, 3, padding=1), ReLU, Upsample(scale_factor=(1, 3)), Conv2d(6, 3, 1) -- at batch 2 on 4 x 4,
opset 13 (nearest Resizes, one into a padded Conv and one into an unpadded 1 x 1 Conv).

And wafer_concat_cnn.onnx (branches joined by torch.cat: a Fire module, three branches, two dense branches;
ConcatNet below) and wafer_flatten_end_cnn.onnx (SqueezeNet's head: a global pool and the Flatten ending the
graph); and wafer_vgg_chain.onnx: nine padded 3 x 3 / 1 x 1 Conv2d + ReLU with three MaxPool2d(2), a global
pool, Flatten, Linear(16, 10) at batch 2 on 16 x 16 -- ten kernels in a chain (pipelined mode beyond 8); and wafer_pad_cnn.onnx: nn.ZeroPad2d((1, 2, 0, 1)),
Conv2d(3, 8, 3), ReLU, nn.ConstantPad2d(1, 0.0), Conv2d(8, 4, 3, stride=2), Tanh, Flatten, Linear(64, 5) at batch 2
on 8 x 7 (Pads of zeros that the canonical graph folds into the Convs); wafer_input_branches.onnx (the graph
input read by a 1 x 1 shortcut Conv and two 3 x 3 Convs, then cat(h, f(h)) into a 1 x 1 Conv, a global pool and a
Linear; class InputBranches) and wafer_dense_stem.onnx (cat(x, f(x)) of the graph input into a strided Conv, Flatten, Linear); and
wafer_inception.onnx (GoogLeNet's shape at a small size, class MiniGoogLeNet: Inception blocks with their
pool branches, a MaxPool of a concatenation, the global pool and a Linear of the last one); and
wafer_shufflenet.onnx (ShuffleNetV2's shape at a small size from torchvision's InvertedResidual, class
MiniShuffleNet: channel split, concatenation and channel shuffle); and wafer_dense_start.onnx
(DenseNet's first two layers, class DenseStart: BatchNorm and ReLU of a value a Concat also reads,
and of a concatenation whose parts other nodes read), and torchvision's DenseNet class at a small
size (mini_densenet: two dense blocks of three layers and a transition); and wafer_layernorm2d_cnn.onnx
(layernorm2d_cnn: Convs each followed by torchvision's LayerNorm2d, ConvNeXt's channels-last LayerNorm), and
torchvision's ConvNeXt class at a small size (mini_convnext: two stages of one block), recurrent stacks
(recurrent: an RNN read at its last step, a 2-layer LSTM read as out[:, -1, :], bidirectional GRU and LSTM
read through h_n, and a bidirectional GRU read as out[:, -1, :], which the wafer refuses).

All are checked against PyTorch's output and the reference executor.

Run with Debian's python3-torch: /usr/bin/python3 tools/export_wafer_activations.py. CI never runs it;
a re-run writes the same bytes.
"""
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_zoo  # noqa: E402  (export, write, write_npy)


def write_case(d, name, model, x, symbolic_ok=False):
    """The plain export at opset 13 (input "x") and PyTorch's output: NAME.onnx, NAME_x.npy, NAME_y.npy in d."""
    y = model(torch.from_numpy(x)).detach().numpy()
    data, outputs = export_zoo.export(model, (torch.from_numpy(x),), ["x"], 13, symbolic_ok)
    assert len(outputs) == 1, outputs
    export_zoo.write(os.path.join(d, name + ".onnx"), data)
    export_zoo.write_npy(os.path.join(d, name + "_x.npy"), x)
    export_zoo.write_npy(os.path.join(d, name + "_y.npy"), y.astype(np.float32))
    print(f"output {outputs[0]} {list(y.shape)}, y min {y.min():.4g} max {y.max():.4g}")


class MeanBnCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                                      nn.Conv2d(8, 12, 3, stride=2, padding=2, dilation=2), nn.PReLU(12))
        self.head = nn.Sequential(nn.Linear(12, 16), nn.BatchNorm1d(16), nn.PReLU(), nn.Linear(16, 4))

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def mean_bn_cnn(d):
    torch.manual_seed(22)
    model = MeanBnCnn()
    bn = model.head[1]
    with torch.no_grad():  # running statistics and an affine map far from the identity
        bn.running_mean.uniform_(-1.0, 1.0)
        bn.running_var.uniform_(0.25, 4.0)
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.uniform_(-0.5, 0.5)
        model.features[4].weight.uniform_(0.05, 0.6)  # a slope per channel, each its own
    model.eval()
    x = np.random.RandomState(9).standard_normal((2, 3, 8, 8)).astype(np.float32)
    write_case(d, "wafer_mean_bn_cnn", model, x)


class QuickGelu(nn.Module):  # CLIP's activation, as its forward writes it
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


def two_value_mlp(d):
    torch.manual_seed(23)
    model = nn.Sequential(nn.Linear(16, 32), nn.Softsign(), nn.Linear(32, 32), nn.Tanhshrink(), nn.Linear(32, 24), QuickGelu(), nn.Linear(24, 8)).eval()
    x = (2.0 * np.random.RandomState(10).standard_normal((4, 16))).astype(np.float32)
    write_case(d, "wafer_two_value_mlp", model, x)


def groupnorm_cnn(d):
    torch.manual_seed(24)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(), nn.Conv2d(8, 12, 3, stride=2, padding=1),
                          nn.InstanceNorm2d(12, affine=True), nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 4))
    with torch.no_grad():  # scales and shifts of their own, not the identity
        for m in (model[1], model[4]):
            m.weight.uniform_(0.5, 2.0)
            m.bias.uniform_(-0.5, 0.5)
    model.eval()
    x = np.random.RandomState(11).standard_normal((2, 3, 8, 8)).astype(np.float32)
    write_case(d, "wafer_groupnorm_cnn", model, x)


def convtranspose(d):
    torch.manual_seed(25)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
                          nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1)).eval()
    x = np.random.RandomState(12).standard_normal((2, 3, 8, 8)).astype(np.float32)
    write_case(d, "wafer_convtranspose_cnn", model, x)
    torch.manual_seed(26)
    model = nn.Sequential(nn.ConvTranspose1d(4, 8, 3, stride=2, padding=1, output_padding=1), nn.ReLU(), nn.Conv1d(8, 4, 3, padding=1), nn.Flatten(),
                          nn.Linear(48, 3)).eval()
    x = np.random.RandomState(13).standard_normal((2, 4, 6)).astype(np.float32)
    write_case(d, "wafer_convtranspose1d", model, x)
    torch.manual_seed(27)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.ConvTranspose2d(8, 3, 4, stride=2, padding=1), nn.Sigmoid()).eval()
    x = np.random.RandomState(14).standard_normal((2, 3, 16, 16)).astype(np.float32)
    write_case(d, "wafer_autoencoder", model, x)
    torch.manual_seed(28)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Upsample(scale_factor=2), nn.Conv2d(8, 6, 3, padding=1), nn.ReLU(),
                          nn.Upsample(scale_factor=(1, 3)), nn.Conv2d(6, 3, 1)).eval()
    x = np.random.RandomState(15).standard_normal((2, 3, 4, 4)).astype(np.float32)
    write_case(d, "wafer_upsample_cnn", model, x)


class ConcatNet(nn.Module):
    """Branches joined by torch.cat: a Fire module (SqueezeNet's), a pool of the concatenation, three
    branches reading it, a 3 x 3 Conv of their concatenation, and two dense branches into a Linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.squeeze = nn.Sequential(nn.Conv2d(8, 4, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(4, 6, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(4, 5, 3, padding=1), nn.ReLU())
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.b1 = nn.Conv2d(11, 4, 1)
        self.b2 = nn.Sequential(nn.Conv2d(11, 3, 3, padding=1), nn.Tanh())
        self.b3 = nn.Sequential(nn.Conv2d(11, 2, 1), nn.Sigmoid())
        self.mix = nn.Conv2d(9, 6, 3, padding=1)
        self.l1 = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
        self.l2 = nn.Sequential(nn.Linear(6, 5), nn.GELU())
        self.head = nn.Linear(13, 4)

    def forward(self, x):
        s = self.squeeze(self.stem(x))
        p = self.pool(torch.cat([self.e1(s), self.e3(s)], 1))
        m = self.mix(torch.relu(torch.cat([self.b1(p), self.b2(p), self.b3(p)], 1)))
        v = m.mean((2, 3))
        return self.head(torch.cat([self.l1(v), self.l2(v)], 1))


def concat_cnn(d):
    torch.manual_seed(29)
    model = ConcatNet().eval()
    x = np.random.RandomState(16).standard_normal((2, 3, 8, 8)).astype(np.float32)
    write_case(d, "wafer_concat_cnn", model, x)
    torch.manual_seed(30)  # SqueezeNet's head: a Conv of the last Fire's concatenation, a global pool and the Flatten ending the graph
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.Conv2d(4, 6, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()
    x = np.random.RandomState(17).standard_normal((2, 3, 9, 9)).astype(np.float32)
    write_case(d, "wafer_flatten_end_cnn", model, x)


def vgg_chain(d):
    torch.manual_seed(31)  # a chain of ten kernels: more than a PE's task ids give one program of all of them
    c = lambda i, o, k=3: [nn.Conv2d(i, o, k, padding=k // 2), nn.ReLU()]
    model = nn.Sequential(*c(3, 8), *c(8, 8), nn.MaxPool2d(2), *c(8, 12), *c(12, 12), nn.MaxPool2d(2), *c(12, 16), *c(16, 16), *c(16, 16, 1), nn.MaxPool2d(2),
                          *c(16, 16), *c(16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()
    x = np.random.RandomState(18).standard_normal((2, 3, 16, 16)).astype(np.float32)
    write_case(d, "wafer_vgg_chain", model, x)


def pad_cnn(d):
    torch.manual_seed(32)  # explicit zero padding before Convs: nn.ZeroPad2d (asymmetric) and nn.ConstantPad2d(1, 0.0)
    model = nn.Sequential(nn.ZeroPad2d((1, 2, 0, 1)), nn.Conv2d(3, 8, 3), nn.ReLU(), nn.ConstantPad2d(1, 0.0), nn.Conv2d(8, 4, 3, stride=2),
                          nn.Tanh(), nn.Flatten(), nn.Linear(4 * 4 * 4, 5)).eval()
    x = np.random.RandomState(19).standard_normal((2, 3, 8, 7)).astype(np.float32)
    write_case(d, "wafer_pad_cnn", model, x, symbolic_ok=True)


class InputBranches(nn.Module):
    """The graph input read by several Convs: a ResNeXt-style block as the whole model (a 1 x 1
    shortcut beside two 3 x 3 Convs), then DenseNet's first concatenation cat(h, f(h))."""

    def __init__(self):
        super().__init__()
        self.short = nn.Conv2d(3, 8, 1)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.grow = nn.Sequential(nn.Conv2d(8, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.Conv2d(12, 6, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3))

    def forward(self, x):
        h = torch.relu(self.short(x) + self.body(x))
        return self.head(torch.cat([h, self.grow(h)], 1))


class DenseStem(nn.Module):  # cat(x, f(x)) of the graph input itself, into a Conv
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.ReLU())
        self.g = nn.Sequential(nn.Conv2d(8, 6, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 3 * 3, 4))

    def forward(self, x):
        return self.g(torch.cat([x, self.f(x)], 1))


def input_branches(d):
    torch.manual_seed(33)
    x = np.random.RandomState(20).standard_normal((2, 3, 8, 8)).astype(np.float32)
    write_case(d, "wafer_input_branches", InputBranches().eval(), x)
    torch.manual_seed(34)
    x = np.random.RandomState(21).standard_normal((2, 3, 7, 7)).astype(np.float32)
    write_case(d, "wafer_dense_stem", DenseStem().eval(), x)


class Inception(nn.Module):
    """GoogLeNet's block: a 1 x 1 branch, 1 x 1 then 3 x 3 branches, and a pool branch --
    MaxPool2d(3, 1, 1, ceil_mode=True) of the block's input, then a 1 x 1 Conv -- joined by torch.cat."""

    def __init__(self, cin, c1, c3r, c3, c5r, c5, cp):
        super().__init__()
        conv = lambda i, o, k: nn.Sequential(nn.Conv2d(i, o, k, padding=k // 2), nn.ReLU())
        self.b1 = conv(cin, c1, 1)
        self.b2 = nn.Sequential(conv(cin, c3r, 1), conv(c3r, c3, 3))
        self.b3 = nn.Sequential(conv(cin, c5r, 1), conv(c5r, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv(cin, cp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class MiniGoogLeNet(nn.Module):
    """GoogLeNet's shape at a small size: a stem and a MaxPool, two Inception blocks (the second reads
    the first's concatenation, its pool branch too), a MaxPool of the concatenation, a third block,
    the global pool, Flatten, Dropout and a Linear of the last concatenation."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True))
        self.i3a = Inception(8, 4, 3, 6, 2, 3, 3)
        self.i3b = Inception(16, 5, 4, 6, 2, 2, 3)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.i4a = Inception(16, 4, 3, 5, 2, 3, 4)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Dropout(0.2), nn.Linear(16, 5))

    def forward(self, x):
        return self.head(self.i4a(self.pool(self.i3b(self.i3a(self.stem(x))))))


def inception(d):
    torch.manual_seed(35)
    x = np.random.RandomState(22).standard_normal((2, 3, 12, 12)).astype(np.float32)
    write_case(d, "wafer_inception", MiniGoogLeNet().eval(), x)


def trained_batchnorm(model):
    """BatchNorm statistics and affine parameters away from the identity, as a trained model has."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


class MiniShuffleNet(nn.Module):
    """ShuffleNetV2's shape at a small size, built from torchvision's own InvertedResidual (channel
    split by chunk, the branches joined by torch.cat, channel_shuffle by view, transpose, view): a
    stem and a MaxPool, a stride-2 unit (both branches read the input), two stride-1 units, a
    second stride-2 unit, a 1 x 1 Conv, the spatial mean and a Linear."""

    def __init__(self):
        super().__init__()
        from torchvision.models.shufflenetv2 import InvertedResidual
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.units = nn.Sequential(InvertedResidual(8, 16, 2), InvertedResidual(16, 16, 1), InvertedResidual(16, 16, 1), InvertedResidual(16, 24, 2))
        self.conv5 = nn.Sequential(nn.Conv2d(24, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        return self.fc(self.conv5(self.units(self.stem(x))).mean((2, 3)))


def shufflenet(d):
    torch.manual_seed(36)
    model = MiniShuffleNet()
    trained_batchnorm(model)
    x = np.random.RandomState(23).standard_normal((2, 3, 32, 32)).astype(np.float32)
    write_case(d, "wafer_shufflenet", model.eval(), x)


class DenseStart(nn.Module):
    """DenseNet's first two layers at a small size: the stem's output h feeds a BatchNorm, ReLU and
    Conv (layer 1) and is concatenated with that layer's output; a BatchNorm, ReLU and Conv of the
    concatenation (layer 2), the spatial mean and a Linear. h is read by a function and by a Concat; the
    concatenation's BatchNorm and ReLU act per part, on parts other nodes read too."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1)
        self.layer1 = nn.Sequential(nn.BatchNorm2d(6), nn.ReLU(), nn.Conv2d(6, 4, 3, padding=1))
        self.layer2 = nn.Sequential(nn.BatchNorm2d(10), nn.ReLU(), nn.Conv2d(10, 5, 1))
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        h = self.stem(x)
        return self.head(self.layer2(torch.cat([h, self.layer1(h)], 1)).mean((2, 3)))


def dense_start(d):
    torch.manual_seed(38)
    model = DenseStart()
    trained_batchnorm(model)
    x = np.random.RandomState(25).standard_normal((2, 3, 6, 6)).astype(np.float32)
    write_case(d, "wafer_dense_start", model.eval(), x)


def mini_densenet(d):
    """torchvision's own DenseNet class at a small size: growth 4, two dense blocks of three layers
    (bottleneck width 8), 8 initial features, a transition between them, 3 classes. Every layer's
    BatchNorm and ReLU act on the concatenation of all earlier feature maps."""
    from torchvision.models.densenet import DenseNet
    torch.manual_seed(39)
    model = DenseNet(growth_rate=4, block_config=(3, 3), num_init_features=8, bn_size=2, num_classes=3)
    trained_batchnorm(model)
    x = np.random.RandomState(26).standard_normal((2, 3, 32, 32)).astype(np.float32)
    write_case(d, "wafer_mini_densenet", model.eval(), x)


def layernorm2d_cnn(d):
    """LayerNorm over each position's channels (torchvision's LayerNorm2d, ConvNeXt's and SAM's:
    permute to channels-last, layer_norm, permute back) after Convs, with affine parameters drawn
    away from the identity."""
    from torchvision.models.convnext import LayerNorm2d
    torch.manual_seed(40)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), LayerNorm2d(8), nn.GELU(), nn.Conv2d(8, 12, 3, stride=2, padding=1),
                          LayerNorm2d(12), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 4))
    with torch.no_grad():
        for m in model:
            if isinstance(m, LayerNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    x = np.random.RandomState(27).standard_normal((2, 3, 8, 8)).astype(np.float32)
    write_case(d, "wafer_layernorm2d_cnn", model.eval(), x)


def mini_convnext(d):
    """torchvision's own ConvNeXt class at a small size: a stem of 16 channels, a stage of one block,
    the downsampling (LayerNorm2d, Conv 2 x 2 stride 2) to 32 channels, a stage of one block, the
    head (global pool, LayerNorm2d, Flatten, Linear to 3). Each block: a depthwise Conv 7 x 7, then
    channels-last a LayerNorm, Linear to 4 C, GELU, Linear back, the layer scale, and the residual.
    The layer scales (1e-6 as initialised) and the LayerNorms' parameters are drawn away from that."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    torch.manual_seed(41)
    model = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], stochastic_depth_prob=0.0, num_classes=3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_scale"):
                p.uniform_(0.2, 0.6)
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):  # (LayerNorm2d too)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    x = np.random.RandomState(28).standard_normal((2, 3, 32, 32)).astype(np.float32)
    write_case(d, "wafer_mini_convnext", model.eval(), x)


class RnnLast(nn.Module):
    """A recurrent stack's output at the last step into a head: nn.RNN on a [steps, batch, x] input
    (batch_first=False), out[-1]; or nn.LSTM / nn.GRU with batch_first=True, out[:, -1, :]."""

    def __init__(self, rnn, hidden, classes, head_relu=False):
        super().__init__()
        self.rnn = rnn
        self.batch_first = rnn.batch_first
        layers = [nn.Linear(hidden, 16), nn.ReLU(), nn.Linear(16, classes)] if head_relu else [nn.Linear(hidden, classes)]
        self.head = nn.Sequential(*layers)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1, :] if self.batch_first else out[-1])


class BiLast(nn.Module):
    """A bidirectional layer read as users of nn.GRU / nn.LSTM classifiers write it: the two
    directions' final states side by side, torch.cat((h_n[-2], h_n[-1]), 1), into a Linear."""

    def __init__(self, rnn, hidden, classes):
        super().__init__()
        self.rnn, self.fc = rnn, nn.Linear(2 * hidden, classes)

    def forward(self, x):
        _, h = self.rnn(x)
        if isinstance(h, tuple):  # (h_n, c_n)
            h = h[0]
        return self.fc(torch.cat((h[-2], h[-1]), 1))


def recurrent(d):
    """Recurrent stacks beside the zoo's (h_n[-1] of a GRU and an LSTM): a 3-layer tanh RNN on a
    sequence-first input read at its last step (out[-1]), a 2-layer LSTM read as out[:, -1, :]
    (batch_first) into a two-layer head, hidden sizes that do not divide a rectangle's side; and a
    bidirectional GRU, which the wafer refuses."""
    cases = [  # (seed, name, model, input shape)
        (31, "wafer_rnn_stack", lambda: RnnLast(nn.RNN(12, 20, num_layers=3), 20, 4), (6, 3, 12)),
        (32, "wafer_lstm_last_step", lambda: RnnLast(nn.LSTM(10, 24, num_layers=2, batch_first=True), 24, 3, head_relu=True), (4, 7, 10)),
        (33, "wafer_gru_bidirectional", lambda: RnnLast(nn.GRU(8, 16, batch_first=True, bidirectional=True), 32, 3), (2, 5, 8)),
        (34, "wafer_gru_bidirectional_hn", lambda: BiLast(nn.GRU(8, 16, batch_first=True, bidirectional=True), 16, 3), (3, 6, 8)),
        (35, "wafer_lstm_bidirectional_hn", lambda: BiLast(nn.LSTM(12, 20, batch_first=True, bidirectional=True), 20, 4), (2, 7, 12)),
    ]
    for seed, name, build, shape in cases:
        torch.manual_seed(seed)
        model = build().eval()
        x = np.random.RandomState(seed).standard_normal(shape).astype(np.float32)
        write_case(d, name, model, x)

def main():
    torch.set_num_threads(1)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = os.path.join(root, "tests", "cli", "data")
    torch.manual_seed(21)
    model = nn.Sequential(nn.Linear(16, 32), nn.ELU(), nn.Linear(32, 32), nn.SELU(), nn.Linear(32, 24), nn.CELU(0.5),
                          nn.Linear(24, 24), nn.Mish(), nn.Linear(24, 16), nn.Softplus(), nn.Linear(16, 7), nn.LogSoftmax(dim=1)).eval()
    x = (2.0 * np.random.RandomState(8).standard_normal((3, 16))).astype(np.float32)
    write_case(d, "wafer_activations_mlp", model, x)
    mean_bn_cnn(d)
    two_value_mlp(d)
    groupnorm_cnn(d)
    convtranspose(d)
    concat_cnn(d)
    vgg_chain(d)
    pad_cnn(d)
    input_branches(d)
    inception(d)
    shufflenet(d)
    dense_start(d)
    mini_densenet(d)
    layernorm2d_cnn(d)
    mini_convnext(d)
    recurrent(d)


if __name__ == "__main__":
    main()
