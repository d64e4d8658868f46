// The reference executor's layout, indexing and creation ops: Tile, Pad, DepthToSpace/SpaceToDepth,
// Trilu, Resize/Upsample, Gather*/Scatter*, OneHot, NonZero, Compress, Unique, Range,
// ConstantOfShape, EyeLike, Size, CastLike, Einsum, Det. Expected values are worked out by hand,
// taken from the examples in the ONNX spec, or computed once with numpy (np.pad, np.einsum), as
// noted; never with the executor itself.
#include <catch2/catch.hpp>

#include "reference_test_util.hpp"

using namespace reftest;

TEST_CASE("reference: Tile repeats every dimension", "[reference]") {
  const Tensor x = f32({2, 2}, {1, 2, 3, 4});
  const Tensor r12 = ints({1, 2}), r21 = ints({2, 1});
  check_f32(op("Tile", {&x, &r12}).one(), {2, 4}, {1, 2, 1, 2, 3, 4, 3, 4});
  check_f32(op("Tile", {&x, &r21}).one(), {4, 2}, {1, 2, 3, 4, 1, 2, 3, 4});
  const Tensor r1 = ints({2});
  CHECK_THAT(error_of(op("Tile", {&x, &r1})), Catch::Contains("one value per dimension"));
}

TEST_CASE("reference: Pad constant, reflect and edge, pads as input or attribute, cropping", "[reference]") {
  const Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  // Expected values from numpy.pad with the same widths and mode.
  const Tensor p_reflect = ints({0, 2, 0, 1});
  Run reflect = op("Pad", {&x, &p_reflect}, 13);
  reflect.attrs.set("mode", std::string("reflect"));
  check_f32(reflect.one(), {2, 6}, {3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5});
  const Tensor p_edge = ints({1, 0, 0, 2});
  Run edge = op("Pad", {&x, &p_edge}, 13);
  edge.attrs.set("mode", std::string("edge"));
  check_f32(edge.one(), {3, 5}, {1, 2, 3, 3, 3, 1, 2, 3, 3, 3, 4, 5, 6, 6, 6});
  const Tensor p_rows = ints({1, 0, 1, 0}), nine = Tensor::scalar_f32(9);
  check_f32(op("Pad", {&x, &p_rows, &nine}, 13).one(), {4, 3}, {9, 9, 9, 1, 2, 3, 4, 5, 6, 9, 9, 9});
  Run attr = op("Pad", {&x}, 2);  // opsets 2-10: pads and value are attributes
  attr.attrs.set("pads", std::vector<int64_t>{0, 1, 0, 0});
  attr.attrs.set("value", 7.0);
  check_f32(attr.one(), {2, 4}, {7, 1, 2, 3, 7, 4, 5, 6});
  const Tensor crop = ints({0, -1, 0, 0});
  check_f32(op("Pad", {&x, &crop}, 13).one(), {2, 2}, {2, 3, 5, 6});
  const Tensor p_axis = ints({1, 1}), axis1 = ints({1});  // opset 18: pads for the named axes only
  check_f32(op("Pad", {&x, &p_axis, nullptr, &axis1}, 18).one(), {2, 5}, {0, 1, 2, 3, 0, 0, 4, 5, 6, 0});
  const Tensor xi = i64({3}, {1, 2, 3}), p2 = ints({2, 2});
  Run ri = op("Pad", {&xi, &p2}, 13);
  ri.attrs.set("mode", std::string("reflect"));
  check_i64(ri.one(), DType::i64, {7}, {3, 2, 1, 2, 3, 2, 1});  // numpy reflects again past the far edge
  Run wrap = op("Pad", {&x, &p_rows}, 13);
  wrap.attrs.set("mode", std::string("wrap"));
  CHECK_THAT(error_of(wrap), Catch::Contains("node 'n_Pad' (Pad, opset 13)") && Catch::Contains("'wrap'"));
  const Tensor short_pads = ints({1, 1});
  CHECK_THAT(error_of(op("Pad", {&x, &short_pads}, 13)), Catch::Contains("2 values per padded axis"));
}

TEST_CASE("reference: DepthToSpace (DCR, CRD) and SpaceToDepth", "[reference]") {
  Tensor x = f32({1, 8, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7});
  Run dcr = op("DepthToSpace", {&x});
  dcr.attrs.set("blocksize", int64_t{2});
  // DCR: out[c][i][j] = x[(2i + j) * 2 + c]; CRD: out[c][i][j] = x[4c + 2i + j].
  const Tensor y = dcr.one();
  check_f32(y, {1, 2, 2, 2}, {0, 2, 4, 6, 1, 3, 5, 7});
  dcr.attrs.set("mode", std::string("CRD"));
  check_f32(dcr.one(), {1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Run s2d = op("SpaceToDepth", {&y});
  s2d.attrs.set("blocksize", int64_t{2});
  check_f32(s2d.one(), {1, 8, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7});  // the inverse of DCR
  dcr.attrs.set("blocksize", int64_t{3});
  CHECK_THAT(error_of(dcr), Catch::Contains("divisible by blocksize^2"));
}

TEST_CASE("reference: Trilu keeps the upper or lower triangle from diagonal k", "[reference]") {
  const Tensor x = f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  check_f32(op("Trilu", {&x}).one(), {3, 3}, {1, 2, 3, 0, 5, 6, 0, 0, 9});
  const Tensor k1 = i64({}, {1}), km1 = i64({}, {-1});
  check_f32(op("Trilu", {&x, &k1}).one(), {3, 3}, {0, 2, 3, 0, 0, 6, 0, 0, 0});
  Run lower = op("Trilu", {&x, &km1});
  lower.attrs.set("upper", int64_t{0});
  check_f32(lower.one(), {3, 3}, {0, 0, 0, 4, 0, 0, 7, 8, 0});
}

TEST_CASE("reference: Resize linear, nearest, align_corners, and Upsample", "[reference]") {
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  // half_pixel: output i reads input (i + 0.5) / 2 - 0.5, neighbours beyond the edge repeat it.
  const Tensor s2 = f32({4}, {1, 1, 2, 2});
  Run lin = op("Resize", {&x, nullptr, &s2}, 13);
  lin.attrs.set("mode", std::string("linear"));
  check_f32(lin.one(), {1, 1, 4, 4}, {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  // align_corners to 3x3: positions 0, 0.5, 1 in each dimension.
  const Tensor sz3 = ints({1, 1, 3, 3});
  Run ac = op("Resize", {&x, nullptr, nullptr, &sz3}, 13);
  ac.attrs.set("mode", std::string("linear"));
  ac.attrs.set("coordinate_transformation_mode", std::string("align_corners"));
  check_f32(ac.one(), {1, 1, 3, 3}, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
  // nearest, half_pixel, round_prefer_floor to 4x4: input rows/cols 0, 0, 1, 1.
  const Tensor sz4 = ints({1, 1, 4, 4});
  check_f32(op("Resize", {&x, nullptr, nullptr, &sz4}, 13).one(), {1, 1, 4, 4},
            {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  const Tensor s23 = f32({4}, {1, 1, 2, 3});
  check_f32(op("Upsample", {&x, &s23}, 9).one(), {1, 1, 4, 6},
            {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
  CHECK_THAT(error_of(op("Resize", {&x, nullptr, &s2, &sz4}, 13)), Catch::Contains("exactly one of scales and sizes"));
  Run aa = op("Resize", {&x, nullptr, &s2}, 18);
  aa.attrs.set("antialias", int64_t{1});
  CHECK_THAT(error_of(aa), Catch::Contains("antialias"));
}

TEST_CASE("reference: GatherElements, GatherND, ScatterElements, ScatterND", "[reference]") {
  const Tensor d = f32({2, 2}, {1, 2, 3, 4});
  const Tensor gi = i64({2, 2}, {0, 0, 1, -2});
  Run ge = op("GatherElements", {&d, &gi});
  ge.attrs.set("axis", int64_t{1});
  check_f32(ge.one(), {2, 2}, {1, 1, 4, 3});
  const Tensor bad = i64({2, 2}, {0, 2, 0, 0});
  ge.inputs = {&d, &bad};
  CHECK_THAT(error_of(ge), Catch::Contains("index 2 is out of range"));
  // Spec examples.
  const Tensor nd = f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor ndi = i64({2, 1}, {1, 0});
  Run gnd = op("GatherND", {&nd, &ndi});
  gnd.attrs.set("batch_dims", int64_t{1});
  check_f32(gnd.one(), {2, 2}, {2, 3, 4, 5});
  const Tensor data = f32({1, 5}, {1, 2, 3, 4, 5});
  const Tensor si = i64({1, 2}, {1, 1});
  const Tensor su = f32({1, 2}, {1.1f, 2.1f});
  Run se = op("ScatterElements", {&data, &si, &su}, 16);
  se.attrs.set("axis", int64_t{1});
  se.attrs.set("reduction", std::string("add"));
  check_f32(se.one(), {1, 5}, {1, 5.2, 3, 4, 5});
  const Tensor v8 = f32({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor ndx = i64({4, 1}, {4, 3, 1, 7});
  const Tensor upd = f32({4}, {9, 10, 11, 12});
  check_f32(op("ScatterND", {&v8, &ndx, &upd}).one(), {8}, {1, 11, 3, 10, 9, 6, 7, 12});
}

TEST_CASE("reference: OneHot, NonZero, Compress, Unique", "[reference]") {
  const Tensor idx = i64({4}, {0, -1, 2, 5});
  const Tensor depth = i64({}, {3});
  const Tensor vals = f32({2}, {0, 1});
  check_f32(op("OneHot", {&idx, &depth, &vals}).one(), {4, 3}, {1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0});
  Run ax0 = op("OneHot", {&idx, &depth, &vals});
  ax0.attrs.set("axis", int64_t{0});
  check_f32(ax0.one(), {3, 4}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0});
  const Tensor nz = f32({2, 2}, {1, 0, 1, 1});
  check_i64(op("NonZero", {&nz}).one(), DType::i64, {2, 3}, {0, 1, 1, 0, 0, 1});
  const Tensor cx = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor cond = boolean({3}, {0, 1, 1});
  Run cmp = op("Compress", {&cx, &cond});
  cmp.attrs.set("axis", int64_t{0});
  check_f32(cmp.one(), {2, 2}, {3, 4, 5, 6});
  const Tensor cond_flat = boolean({5}, {0, 1, 0, 0, 1});
  check_f32(op("Compress", {&cx, &cond_flat}).one(), {2}, {2, 5});
  const Tensor ux = f32({6}, {2, 1, 1, 3, 4, 3});
  Run u = op("Unique", {&ux}, 11);
  u.num_outputs = 4;
  auto r = u.all();
  check_f32(r[0], {4}, {1, 2, 3, 4});
  CHECK(r[1].to_i64() == std::vector<int64_t>{1, 0, 3, 4});
  CHECK(r[2].to_i64() == std::vector<int64_t>{1, 0, 0, 2, 3, 2});
  CHECK(r[3].to_i64() == std::vector<int64_t>{2, 1, 2, 1});
  u.attrs.set("sorted", int64_t{0});
  r = u.all();
  check_f32(r[0], {4}, {2, 1, 3, 4});
  CHECK(r[2].to_i64() == std::vector<int64_t>{0, 1, 1, 2, 3, 2});
}

TEST_CASE("reference: Range, ConstantOfShape, EyeLike, Size, CastLike", "[reference]") {
  const Tensor s = i64({}, {1}), l = i64({}, {10}), d = i64({}, {3});
  check_i64(op("Range", {&s, &l, &d}).one(), DType::i64, {3}, {1, 4, 7});
  const Tensor fs = Tensor::scalar_f32(1), fl = Tensor::scalar_f32(-1), fd = Tensor::scalar_f32(-0.5f);
  check_f32(op("Range", {&fs, &fl, &fd}).one(), {4}, {1, 0.5, 0, -0.5});
  check_f32(op("Range", {&fl, &fs, &fd}).one(), {0}, {});
  const Tensor zero = i64({}, {0});
  CHECK_THAT(error_of(op("Range", {&s, &l, &zero})), Catch::Contains("delta must be non-zero"));
  const Tensor shape = ints({2, 3});
  Run cos = op("ConstantOfShape", {&shape});
  check_f32(cos.one(), {2, 3}, {0, 0, 0, 0, 0, 0});
  cos.attrs.set("value", i64({1}, {7}));
  check_i64(cos.one(), DType::i64, {2, 3}, {7, 7, 7, 7, 7, 7});
  const Tensor huge = ints({100000, 100000, 1000});
  CHECK_THAT(error_of(op("ConstantOfShape", {&huge})), Catch::Contains("more than 2^31 elements"));
  const Tensor no_dims = i64({0}, {});
  CHECK(op("ConstantOfShape", {&no_dims}).one().shape() == Shape{});
  const Tensor m = f32({2, 3}, {9, 9, 9, 9, 9, 9});
  Run eye = op("EyeLike", {&m});
  eye.attrs.set("k", int64_t{1});
  check_f32(eye.one(), {2, 3}, {0, 1, 0, 0, 0, 1});
  eye.attrs.set("dtype", int64_t{7});
  check_i64(eye.one(), DType::i64, {2, 3}, {0, 1, 0, 0, 0, 1});
  check_i64(op("Size", {&m}).one(), DType::i64, {}, {6});
  const Tensor fx = f32({2}, {1.7f, -2.5f}), like = i64({1}, {0});
  check_i64(op("CastLike", {&fx, &like}).one(), DType::i64, {2}, {1, -2});
}

TEST_CASE("reference: Einsum explicit, implicit, diagonal and broadcast", "[reference]") {
  // Expected values from numpy.einsum.
  std::vector<float> av, bv;
  for (int i = 0; i < 12; ++i) {
    av.push_back(0.5f * static_cast<float>(i));
    bv.push_back(static_cast<float>(i) - 3);
  }
  const Tensor a = f32({2, 2, 3}, av), b = f32({2, 3, 2}, bv);
  Run bmm = op("Einsum", {&a, &b});
  bmm.attrs.set("equation", std::string("bij, bjk -> bik"));
  check_f32(bmm.one(), {2, 2, 2}, {0.5, 2, -4, 2, 54.5, 65, 77, 92});
  const Tensor m = f32({3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  Run diag = op("Einsum", {&m});
  diag.attrs.set("equation", std::string("ii->i"));
  check_f32(diag.one(), {3}, {0, 4, 8});
  Run tr = op("Einsum", {&m});
  tr.attrs.set("equation", std::string("ji"));  // implicit output "ij": a transpose
  check_f32(tr.one(), {3, 3}, {0, 3, 6, 1, 4, 7, 2, 5, 8});
  const Tensor u = f32({2}, {1, 2}), v = f32({3}, {3, 4, 5});
  Run outer = op("Einsum", {&u, &v});
  outer.attrs.set("equation", std::string("i,j"));
  check_f32(outer.one(), {2, 3}, {3, 4, 5, 6, 8, 10});
  const Tensor w = f32({3, 2}, {1, 0, 0, 1, 1, 1});
  Run ell = op("Einsum", {&a, &w});
  ell.attrs.set("equation", std::string("...ij,jk->...ik"));
  check_f32(ell.one(), {2, 2, 2}, {1, 1.5, 4, 4.5, 7, 7.5, 10, 10.5});
  Run mismatch = op("Einsum", {&a, &u});
  mismatch.attrs.set("equation", std::string("bij,j->bi"));
  CHECK_THAT(error_of(mismatch), Catch::Contains("n_Einsum") && Catch::Contains("label 'j' has sizes 3 and 2"));
  Run rank = op("Einsum", {&m});
  rank.attrs.set("equation", std::string("ijk->i"));
  CHECK_THAT(error_of(rank), Catch::Contains("does not match an operand of rank 2"));
}

TEST_CASE("reference: Det of a batch of matrices", "[reference]") {
  const Tensor x = f32({3, 2, 2}, {1, 2, 3, 4, 2, 0, 0, 3, 1, 2, 2, 4});
  check_f32(op("Det", {&x}).one(), {3}, {-2, 6, 0});
  const Tensor p = f32({3, 3}, {0, 2, 1, 1, 0, 0, 0, 0, 3});  // needs a row swap: det = -6
  check_f32(op("Det", {&p}).one(), {}, {-6});
}
