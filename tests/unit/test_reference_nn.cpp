// The reference executor's recurrent layers, losses, normalisations, Hardmax and pooling additions,
// GridSample, NonMaxSuppression, windows and quantisation. Recurrent outputs were computed once with
// the numpy reference cells of the ONNX backend tests (onnx/backend/test/case/node/{lstm,gru,rnn}.py;
// reverse direction by running them on the reversed sequence); the rest by hand, numpy or the
// examples of the ONNX spec, as noted. Never with the executor itself.
#include <catch2/catch.hpp>

#include "reference_test_util.hpp"

using namespace reftest;

namespace {

// values[i] = i * step + start, in fp32 arithmetic (as numpy computes arange(n, float32) * step + start).
Tensor ramp(Shape s, float step, float start) {
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * step + start;
  return f32(std::move(s), v);
}

const Tensor kX = f32({3, 2, 2}, {0.5f, -1, 1.5f, 0.25f, -0.5f, 2, 0, 1, 1, 1, -1, -0.5f});
const Tensor kH0 = f32({1, 2, 2}, {0.1f, -0.2f, 0.3f, 0});

}  // namespace

TEST_CASE("reference: LSTM with bias, initial state and peepholes", "[reference]") {
  const Tensor W = ramp({1, 8, 2}, 0.05f, -0.3f), R = ramp({1, 8, 2}, -0.04f, 0.25f), B = ramp({1, 16}, 0.02f, -0.1f);
  const Tensor c0 = f32({1, 2, 2}, {-0.5f, 0.4f, 0.2f, 0.1f});
  const Tensor P = f32({1, 6}, {0.1f, -0.1f, 0.2f, 0.05f, -0.3f, 0.15f});
  Run lstm = op("LSTM", {&kX, &W, &R, &B, nullptr, &kH0, &c0, &P}, 14);
  lstm.num_outputs = 3;
  const auto r = lstm.all();
  check_f32(r[0], {3, 1, 2, 2},
            {-0.1252442, 0.1127183, 0.1604002, 0.1818531, 0.0469476, 0.2406354, 0.1884473, 0.2301033, 0.1416493,
             0.2960280, -0.0316625, -0.0334202});
  check_f32(r[1], {1, 2, 2}, {0.1416493, 0.2960280, -0.0316625, -0.0334202});
  CHECK(r[2].shape() == Shape{1, 2, 2});
  // layout = 1 (batch first) computes the same sequences.
  const Tensor Xb = f32({2, 3, 2}, {0.5f, -1, -0.5f, 2, 1, 1, 1.5f, 0.25f, 0, 1, -1, -0.5f});
  const Tensor h0b = f32({2, 1, 2}, {0.1f, -0.2f, 0.3f, 0}), c0b = f32({2, 1, 2}, {-0.5f, 0.4f, 0.2f, 0.1f});
  Run batch_first = op("LSTM", {&Xb, &W, &R, &B, nullptr, &h0b, &c0b, &P}, 14);
  batch_first.attrs.set("layout", int64_t{1});
  check_f32(batch_first.one(), {2, 3, 1, 2},
            {-0.1252442, 0.1127183, 0.0469476, 0.2406354, 0.1416493, 0.2960280, 0.1604002, 0.1818531, 0.1884473,
             0.2301033, -0.0316625, -0.0334202});
  Run bad = op("LSTM", {&kX, &W, &R}, 14);
  bad.attrs.set("direction", std::string("sideways"));
  CHECK_THAT(error_of(bad), Catch::Contains("node 'n_LSTM' (LSTM, opset 14)") && Catch::Contains("sideways"));
  const Tensor R_wrong = ramp({1, 8, 3}, 0.1f, 0);
  CHECK_THAT(error_of(op("LSTM", {&kX, &W, &R_wrong}, 14)), Catch::Contains("R of shape [1, 8, 3]"));
}

TEST_CASE("reference: GRU with and without linear_before_reset", "[reference]") {
  const Tensor W = ramp({1, 6, 2}, 0.07f, -0.2f), R = ramp({1, 6, 2}, -0.05f, 0.3f), B = ramp({1, 12}, 0.03f, -0.15f);
  Run gru = op("GRU", {&kX, &W, &R, &B, nullptr, &kH0}, 14);
  check_f32(gru.one(), {3, 1, 2, 2},
            {-0.0160275, -0.1605263, 0.4980050, 0.4058868, 0.3839392, 0.3284186, 0.4749110, 0.4796243, 0.5587980,
             0.5717847, 0.0980687, -0.0187865});
  gru.attrs.set("linear_before_reset", int64_t{1});
  check_f32(gru.one(), {3, 1, 2, 2},
            {-0.0566901, -0.2090995, 0.4730825, 0.3898302, 0.3507309, 0.2981922, 0.4367047, 0.4469065, 0.5284162,
             0.5473689, 0.0470442, -0.0653321});
}

TEST_CASE("reference: RNN bidirectional and with sequence lengths", "[reference]") {
  const Tensor W = f32({2, 2, 2}, {0.3f, -0.2f, 0.1f, 0.4f, -0.3f, 0.2f, 0.5f, 0.1f});
  const Tensor R = f32({2, 2, 2}, {0.2f, 0.1f, -0.1f, 0.3f, 0.05f, -0.2f, 0.25f, 0.1f});
  const Tensor B = f32({2, 4}, {0.1f, -0.1f, 0, 0.2f, 0, 0.05f, -0.05f, 0.1f});
  const Tensor h0 = f32({2, 2, 2}, {0.1f, -0.2f, 0.3f, 0, 0, 0.5f, -0.4f, 0.2f});
  Run bi = op("RNN", {&kX, &W, &R, &B, nullptr, &h0}, 14);
  bi.attrs.set("direction", std::string("bidirectional"));
  bi.num_outputs = 2;
  const auto r = bi.all();
  check_f32(r[0], {3, 2, 2, 2},
            {0.4218990,  -0.3095069, 0.5079775,  0.3095069,  -0.3832980, 0.3762359, -0.4485150, 0.7645810,
             -0.3770111, 0.6137765,  0.0325347,  0.4945415,  0.3407552,  0.1047879, 0.2390220,  0.2239540,
             0.1838606,  0.6760669,  -0.0440105, -0.0548360, -0.2449187, 0.6640368, 0.0897578,  -0.4462436});
  check_f32(r[1], {2, 2, 2},
            {0.1838606, 0.6760669, -0.0440105, -0.0548360, -0.3832980, 0.3762359, -0.4485150, 0.7645810});
  // Forward only; batch 1 stops after one step: zeros after it, and Y_h is its state after step 0.
  const Tensor Wf = f32({1, 2, 2}, {0.3f, -0.2f, 0.1f, 0.4f}), Rf = f32({1, 2, 2}, {0.2f, 0.1f, -0.1f, 0.3f});
  const Tensor Bf = f32({1, 4}, {0.1f, -0.1f, 0, 0.2f}), h0f = f32({1, 2, 2}, {0.1f, -0.2f, 0.3f, 0});
  const Tensor lens = Tensor::from_i64({2}, {3, 1}).cast(DType::i32);
  Run fw = op("RNN", {&kX, &Wf, &Rf, &Bf, &lens, &h0f}, 14);
  fw.num_outputs = 2;
  const auto s = fw.all();
  check_f32(s[0], {3, 1, 2, 2},
            {0.4218990, -0.3095069, 0.5079775, 0.3095069, -0.3770111, 0.6137765, 0, 0, 0.1838606, 0.6760669, 0, 0});
  check_f32(s[1], {1, 2, 2}, {0.1838606, 0.6760669, 0.5079775, 0.3095069});
}

TEST_CASE("reference: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss", "[reference]") {
  // Log-probabilities [3, 4]; targets 2, 0, 3; class weights. Worked by hand (numpy to check).
  const Tensor lp = f32({3, 4}, {-1, -2, -0.5f, -3, -0.2f, -1.5f, -2.5f, -0.7f, -1.1f, -0.3f, -2.2f, -1.9f});
  const Tensor t = i64({3}, {2, 0, 3});
  const Tensor w = f32({4}, {0.5f, 2, 1, 4});
  Run none = op("NegativeLogLikelihoodLoss", {&lp, &t, &w}, 13);
  none.attrs.set("reduction", std::string("none"));
  check_f32(none.one(), {3}, {0.5, 0.1, 7.6});
  check_f32(op("NegativeLogLikelihoodLoss", {&lp, &t, &w}, 13).one(), {}, {8.2 / 5.5});  // mean over the weights
  Run ign = op("NegativeLogLikelihoodLoss", {&lp, &t, &w}, 13);
  ign.attrs.set("ignore_index", int64_t{3});
  check_f32(ign.one(), {}, {0.6 / 1.5});
  ign.attrs.set("reduction", std::string("sum"));
  check_f32(ign.one(), {}, {0.6});
  // [N, C, d]: input [1, 2, 2], targets [[1, 0]] -> losses 3 and 2, mean 2.5.
  const Tensor lp3 = f32({1, 2, 2}, {-1, -2, -3, -4});
  const Tensor t3 = i64({1, 2}, {1, 0});
  check_f32(op("NegativeLogLikelihoodLoss", {&lp3, &t3}, 13).one(), {}, {2.5});
  const Tensor t_bad = i64({3}, {2, 0, 4});
  CHECK_THAT(error_of(op("NegativeLogLikelihoodLoss", {&lp, &t_bad}, 13)),
             Catch::Contains("target 4 is outside the 4 classes"));
  // Softmax cross-entropy: log_softmax of the scores, then the mean NLL; values from numpy.
  const Tensor scores = f32({2, 3}, {1, 2, 0.5f, 0.1f, -1, 3});
  const Tensor labels = i64({2}, {1, 2});
  Run sce = op("SoftmaxCrossEntropyLoss", {&scores, &labels}, 13);
  sce.num_outputs = 2;
  const auto r = sce.all();
  check_f32(r[0], {}, {0.2675715});
  check_f32(r[1], {2, 3}, {-1.4643688, -0.4643688, -1.9643688, -2.9707742, -4.0707742, -0.0707742});
}

TEST_CASE("reference: InstanceNormalization, LRN, MeanVarianceNormalization", "[reference]") {
  const Tensor x = f32({1, 2, 1, 3}, {-1, 0, 1, 2, 3, 4});
  const Tensor scale = f32({2}, {1, 1.5f}), bias = f32({2}, {0, 1});
  // numpy: scale * (x - mean) / sqrt(var + 1e-5) + bias per (n, c).
  check_f32(op("InstanceNormalization", {&x, &scale, &bias}).one(), {1, 2, 1, 3},
            {-1.2247357, 0, 1.2247357, -0.8371035, 1, 2.8371035});
  const Tensor xl = f32({1, 4, 1, 1}, {1, 2, 3, 4});
  Run lrn = op("LRN", {&xl});
  lrn.attrs.set("size", int64_t{3});
  check_f32(lrn.one(), {1, 4, 1, 1}, {0.999875, 1.9993003, 2.9978268, 3.9975018});  // numpy, the spec's window
  const Tensor xm = f32({1, 2, 1, 2}, {1, 3, 2, 6});
  check_f32(op("MeanVarianceNormalization", {&xm}).one(), {1, 2, 1, 2}, {-1, 1, -1, 1});
  const Tensor one_channel = f32({1}, {1});
  CHECK_THAT(error_of(op("InstanceNormalization", {&x, &one_channel, &bias})), Catch::Contains("scale of shape [1]"));
}

TEST_CASE("reference: Hardmax, GlobalMaxPool, MaxUnpool", "[reference]") {
  const Tensor x = f32({2, 3}, {1, 3, 3, 2, 0, -1});
  check_f32(op("Hardmax", {&x}, 13).one(), {2, 3}, {0, 1, 0, 1, 0, 0});  // the first maximum
  const Tensor x3 = f32({1, 2, 2}, {1, 4, 3, 2});
  check_f32(op("Hardmax", {&x3}, 11).one(), {1, 2, 2}, {0, 1, 0, 0});  // opset 11: over the flattened [1, 4]
  const Tensor p = f32({1, 2, 2, 1}, {1, 5, -2, -3});
  check_f32(op("GlobalMaxPool", {&p}).one(), {1, 2, 1, 1}, {5, -2});
  const Tensor v = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor idx = i64({1, 1, 2, 2}, {5, 7, 13, 15});
  Run un = op("MaxUnpool", {&v, &idx}, 11);
  un.attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
  un.attrs.set("strides", std::vector<int64_t>{2, 2});
  check_f32(un.one(), {1, 1, 4, 4}, {0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4});
}

TEST_CASE("reference: GridSample bilinear, border padding, nearest", "[reference]") {
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  // align_corners 0: grid -1 -> pixel -0.5, 0 -> 0.5, 1 -> 1.5.
  const Tensor grid = f32({1, 1, 3, 2}, {0, 0, -1, -1, 1, 1});
  check_f32(op("GridSample", {&x, &grid}, 16).one(), {1, 1, 1, 3}, {2.5, 0.25, 1});
  Run border = op("GridSample", {&x, &grid}, 16);
  border.attrs.set("padding_mode", std::string("border"));
  check_f32(border.one(), {1, 1, 1, 3}, {2.5, 1, 4});
  const Tensor g2 = f32({1, 1, 1, 2}, {0.9f, -0.9f});  // align_corners 1: x 0.95 -> 1, y 0.05 -> 0
  Run nearest = op("GridSample", {&x, &g2}, 16);
  nearest.attrs.set("mode", std::string("nearest"));
  nearest.attrs.set("align_corners", int64_t{1});
  check_f32(nearest.one(), {1, 1, 1, 1}, {2});
}

TEST_CASE("reference: NonMaxSuppression keeps the best boxes per class", "[reference]") {
  // Boxes A, B overlap (IoU 0.9 / 1.1); C is apart. Scores 0.9, 0.8, 0.7.
  const Tensor boxes = f32({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 2, 1, 3});
  const Tensor scores = f32({1, 1, 3}, {0.9f, 0.8f, 0.7f});
  const Tensor three = i64({1}, {3}), one = i64({1}, {1});
  const Tensor iou = f32({1}, {0.5f}), min_score = f32({1}, {0.75f});
  check_i64(op("NonMaxSuppression", {&boxes, &scores, &three, &iou}, 11).one(), DType::i64, {2, 3}, {0, 0, 0, 0, 0, 2});
  check_i64(op("NonMaxSuppression", {&boxes, &scores, &one, &iou}, 11).one(), DType::i64, {1, 3}, {0, 0, 0});
  check_i64(op("NonMaxSuppression", {&boxes, &scores, &three, &iou, &min_score}, 11).one(), DType::i64, {1, 3},
            {0, 0, 0});
}

TEST_CASE("reference: window functions", "[reference]") {
  const Tensor four = i64({}, {4}), three = i64({}, {3});
  check_f32(op("HannWindow", {&four}).one(), {4}, {0, 0.5, 1, 0.5});
  Run sym = op("HannWindow", {&three});
  sym.attrs.set("periodic", int64_t{0});
  check_f32(sym.one(), {3}, {0, 1, 0});
  check_f32(op("HammingWindow", {&four}).one(), {4}, {2.0 / 23, 25.0 / 46, 1, 25.0 / 46});
  check_f32(op("BlackmanWindow", {&four}).one(), {4}, {0, 0.34, 1, 0.34});
}

TEST_CASE("reference: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger", "[reference]") {
  // The examples of the ONNX spec.
  const Tensor x = f32({6}, {0, 2, 3, 1000, -254, -1000});
  const Tensor scale = Tensor::scalar_f32(2), zp = i64({}, {128}).cast(DType::u8);
  check_i64(op("QuantizeLinear", {&x, &scale, &zp}, 13).one(), DType::u8, {6}, {128, 129, 130, 255, 1, 0});
  const Tensor q = i64({4}, {0, 3, 128, 255}).cast(DType::u8);
  check_f32(op("DequantizeLinear", {&q, &scale, &zp}, 13).one(), {4}, {-256, -250, 0, 254});
  const Tensor dx = f32({6}, {0, 2, -3, -2.5f, 1.34f, 0.5f});
  Run dyn = op("DynamicQuantizeLinear", {&dx}, 11);
  dyn.num_outputs = 3;
  const auto d = dyn.all();
  check_i64(d[0], DType::u8, {6}, {153, 255, 0, 26, 221, 179});
  check_f32(d[1], {}, {5.0 / 255});
  check_i64(d[2], DType::u8, {}, {153});
  const Tensor a = i64({4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0}).cast(DType::u8);
  const Tensor b = i64({3, 2}, {1, 4, 2, 5, 3, 6}).cast(DType::u8);
  const Tensor azp = i64({}, {12}).cast(DType::u8);
  check_i64(op("MatMulInteger", {&a, &b, &azp}, 10).one(), DType::i32, {4, 2},
            {-38, -83, -44, -98, -50, -113, -56, -128});
}

// The blocked, threaded MatMul sums each element over k in order exactly as a plain i-k-j loop:
// fp64 tensors (no rounding at the end to hide a difference) compared bit for bit, in shapes that
// leave remainders in every block (k blocks of 128 taken 4 at a time, j blocks of 512) and are
// large enough to be split over threads, batched with broadcasting.
TEST_CASE("reference: the blocked threaded MatMul gives the plain loop's bits", "[reference]") {
  const int64_t B = 2, M = 130, K = 603, N = 701;
  std::vector<float> av(static_cast<size_t>(B * M * K)), bv(static_cast<size_t>(K * N));
  uint64_t r = 99;
  auto next = [&] { r = r * 6364136223846793005ull + 1442695040888963407ull; return static_cast<float>(static_cast<int64_t>(r >> 40) % 2001 - 1000) / 37.0f; };
  for (auto& e : av) e = next();
  for (auto& e : bv) e = next();
  const Tensor a = f32({B, M, K}, av).cast(DType::f64), b = f32({K, N}, bv).cast(DType::f64);
  const Tensor y = op("MatMul", {&a, &b}).one();
  REQUIRE(y.dtype() == DType::f64);
  REQUIRE(y.shape() == Shape{B, M, N});
  const auto got = y.to_f64();
  const auto A = a.to_f64(), Bm = b.to_f64();
  int64_t diff = 0;
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < M; ++i) {
      std::vector<double> row(static_cast<size_t>(N), 0.0);
      for (int64_t k = 0; k < K; ++k) {
        const double x = A[static_cast<size_t>((bi * M + i) * K + k)];
        for (int64_t j = 0; j < N; ++j) row[static_cast<size_t>(j)] += x * Bm[static_cast<size_t>(k * N + j)];
      }
      for (int64_t j = 0; j < N; ++j) diff += got[static_cast<size_t>((bi * M + i) * N + j)] != row[static_cast<size_t>(j)];
    }
  CHECK(diff == 0);
}
