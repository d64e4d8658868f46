// Tensors (isa/tensor.hpp), .npy files (isa/npy.hpp) and comparisons (isa/compare.hpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "isa/compare.hpp"
#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "isa/npy.hpp"
#include "isa/numeric.hpp"
#include "isa/tensor.hpp"

using namespace tessera;
using Catch::Matchers::Contains;

namespace {

const std::string kMagic("\x93NUMPY", 6);

// A .npy file built by hand: magic, version major.0, little-endian header length (2 bytes for
// v1.0, 4 for v2.0/v3.0), the header padded with spaces to a multiple of 64 and ending in '\n'.
std::string make_npy(int major, std::string header, const std::string& data) {
  const size_t pre = major == 1 ? 10 : 12;
  const size_t unpadded = pre + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out = kMagic;
  out += static_cast<char>(major);
  out += static_cast<char>(0);
  const uint32_t len = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The text of the InputError that decoding `bytes` throws ("" if it does not throw one).
std::string decode_error(const std::string& bytes) {
  try {
    (void)npy_decode(bytes, "case.npy");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A tensor of the given dtype and shape with pseudo-random contents (bool: 0/1).
Tensor random_tensor(DType dt, const Shape& shape, uint32_t seed) {
  Tensor t(dt, shape);
  std::mt19937 rng(seed);
  auto* p = reinterpret_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng() & 0xff);
  if (dt == DType::boolean)
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  return t;
}

std::filesystem::path temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("tessera_test_npy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return float_bits(a) == float_bits(b);
}

}  // namespace

// ---------------------------------------------------------------------------------------- npy

TEST_CASE("npy: round trip for every supported dtype in 0-d 1-d 3-d and empty shapes", "[npy]") {
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::i64, DType::i32,
                          DType::i16, DType::i8,  DType::u8,  DType::boolean};
  const char* descrs[] = {"<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "|i1", "|u1", "|b1"};
  const Shape shapes[] = {{}, {5}, {2, 3, 4}, {0}, {2, 0, 3}};
  const char* shape_text[] = {"'shape': ()", "'shape': (5,)", "'shape': (2, 3, 4)", "'shape': (0,)", "'shape': (2, 0, 3)"};
  const auto dir = temp_dir();
  uint32_t seed = 1;
  for (size_t d = 0; d < std::size(dtypes); ++d) {
    for (size_t s = 0; s < std::size(shapes); ++s) {
      const Tensor t = random_tensor(dtypes[d], shapes[s], seed++);
      INFO(dtype_name(dtypes[d]) << " " << shape_str(shapes[s]));
      const std::string bytes = npy_encode(t);
      // Version 1.0 layout: magic, 1, 0, header length, header padded to 64 ending in '\n'.
      REQUIRE(bytes.size() >= 10);
      CHECK(bytes.compare(0, 6, kMagic) == 0);
      CHECK(bytes[6] == 1);
      CHECK(bytes[7] == 0);
      const size_t hlen = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
      CHECK((10 + hlen) % 64 == 0);
      REQUIRE(bytes.size() == 10 + hlen + t.nbytes());
      const std::string header = bytes.substr(10, hlen);
      CHECK(header.back() == '\n');
      CHECK(contains(header, std::string("'descr': '") + descrs[d] + "'"));
      CHECK(contains(header, "'fortran_order': False"));
      CHECK(contains(header, shape_text[s]));
      CHECK(bytes.compare(10 + hlen, t.nbytes(), std::string(reinterpret_cast<const char*>(t.data()), t.nbytes())) == 0);

      const Tensor back = npy_decode(bytes, "mem.npy");
      CHECK(back == t);
      CHECK(back.dtype() == t.dtype());
      CHECK(back.shape() == t.shape());

      const std::string path = (dir / ("rt_" + std::to_string(d) + "_" + std::to_string(s) + ".npy")).string();
      write_npy(path, t);
      CHECK(read_npy(path) == t);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy: formats NumPy lacks are written widened to <f4", "[npy]") {
  for (DType dt : {DType::bf16, DType::cbf16, DType::f8e4m3, DType::f8e5m2}) {
    INFO(dtype_name(dt));
    const Tensor t = random_tensor(dt, {3, 7}, 99);
    const Tensor back = npy_decode(npy_encode(t), "mem.npy");
    CHECK(back.dtype() == DType::f32);
    CHECK(back.shape() == t.shape());
    const auto want = t.to_f32();
    const auto got = back.as<float>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(same_float(got[i], want[i]));
    // Exact widening: casting back gives the original bits (NaNs aside).
    const Tensor again = back.cast(dt);
    const auto wb = t.to_f32();
    const auto ab = again.to_f32();
    for (size_t i = 0; i < wb.size(); ++i) CHECK(same_float(ab[i], wb[i]));
  }
}

TEST_CASE("npy: reads hand-built v1.0 v2.0 and v3.0 files", "[npy]") {
  const std::vector<float> f = {1.5f, -2.0f, 0.25f, 1e-3f, -0.0f, 65504.0f};
  const std::string data = raw_bytes(f);
  for (int major : {1, 2, 3}) {
    INFO("version " << major << ".0");
    const Tensor t = npy_decode(make_npy(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data), "v.npy");
    CHECK(t.dtype() == DType::f32);
    CHECK(t.shape() == Shape{2, 3});
    const auto v = t.as<float>();
    REQUIRE(v.size() == f.size());
    for (size_t i = 0; i < f.size(); ++i) CHECK(float_bits(v[i]) == float_bits(f[i]));
  }
  // Key order, quoting and spacing vary between writers; no trailing comma; '<' for one-byte types.
  const Tensor a = npy_decode(make_npy(1, "{\"shape\": (4,),\"fortran_order\":False, 'descr':'<u1'}", std::string("\x01\x02\xff\x00", 4)), "a.npy");
  CHECK(a.dtype() == DType::u8);
  CHECK(a.to_i64() == std::vector<int64_t>{1, 2, 255, 0});
  const Tensor b = npy_decode(make_npy(3, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,1,2)}", std::string("\x01\x00\x00\x01", 4)), "b.npy");
  CHECK(b.dtype() == DType::boolean);
  CHECK(b.shape() == Shape{2, 1, 2});
  CHECK(b.to_i64() == std::vector<int64_t>{1, 0, 0, 1});
  const std::vector<int64_t> iv = {-1, std::numeric_limits<int64_t>::min()};
  const Tensor c = npy_decode(make_npy(2, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", raw_bytes(iv)), "c.npy");
  CHECK(c.as<int64_t>()[0] == -1);
  CHECK(c.as<int64_t>()[1] == std::numeric_limits<int64_t>::min());
  // A 0-d array holds one element.
  const Tensor s = npy_decode(make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", raw_bytes(std::vector<double>{2.5})), "s.npy");
  CHECK(s.rank() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.as<double>()[0] == 2.5);
}

TEST_CASE("npy: malformed files are InputErrors that name the header field", "[npy]") {
  const std::string data = raw_bytes(std::vector<float>{1, 2, 3, 4, 5, 6});
  const std::string good = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data);
  REQUIRE(decode_error(good).empty());

  std::string e = decode_error(make_npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data));
  CHECK_THAT(e, Contains("descr"));
  CHECK_THAT(e, Contains("big-endian"));
  CHECK_THAT(e, Contains("case.npy"));

  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data));
  CHECK_THAT(e, Contains("fortran_order"));
  CHECK_THAT(e, Contains("Fortran"));

  e = decode_error(good.substr(0, good.size() - 1));  // one byte short
  CHECK_THAT(e, Contains("shape"));
  CHECK_THAT(e, Contains("truncated"));
  CHECK_THAT(e, Contains("23 bytes"));
  e = decode_error(good + "x");  // trailing garbage is as wrong as missing data
  CHECK_THAT(e, Contains("shape"));

  std::string bad_magic = good;
  bad_magic[1] = 'n';
  e = decode_error(bad_magic);
  CHECK_THAT(e, Contains("magic"));
  CHECK_THAT(decode_error("PK\x03\x04 not numpy at all"), Contains("magic"));
  CHECK_THAT(decode_error(""), Contains("magic"));

  e = decode_error(make_npy(4, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data));
  CHECK_THAT(e, Contains("version"));
  e = decode_error(make_npy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", data));
  CHECK_THAT(e, Contains("descr"));
  CHECK_THAT(e, Contains("<c8"));
  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': False, }", data));
  CHECK_THAT(e, Contains("shape"));
  CHECK_THAT(e, Contains("missing"));
  e = decode_error(make_npy(1, "{'descr': '<f4', 'shape': (6,), }", data));
  CHECK_THAT(e, Contains("fortran_order"));
  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", data));
  CHECK_THAT(e, Contains("fortran_order"));
  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", data));
  CHECK_THAT(e, Contains("shape"));
  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1}", data));
  CHECK_THAT(e, Contains("extra"));
  // Header length pointing past the end of the file.
  std::string short_header = good.substr(0, 40);
  CHECK_FALSE(decode_error(short_header).empty());
  // Absurd shapes are reported, not allocated (and their sizes do not overflow to something small).
  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 1000000000), }", data));
  CHECK_THAT(e, Contains("shape"));
  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""));
  CHECK_THAT(e, Contains("shape"));
  e = decode_error(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (123456789012345678901234567890,), }", data));
  CHECK_THAT(e, Contains("shape"));

  // read_npy names the file.
  const std::string missing = "/nonexistent/dir/x.npy";
  try {
    (void)read_npy(missing);
    FAIL("read_npy of a missing file did not throw");
  } catch (const InputError& err) {
    CHECK(contains(err.what(), missing));
  }
}

TEST_CASE("npy: reads arrays written by NumPy", "[npy]") {
  // tests/data/numpy_*.npy: written by numpy 1.24 (np.save), see the values below.
  const Tensor f = read_npy(TESSERA_SOURCE_DIR "/tests/data/numpy_f32_2x3.npy");
  CHECK(f.dtype() == DType::f32);
  CHECK(f.shape() == Shape{2, 3});
  const auto fv = f.as<float>();
  const std::vector<float> want = {0.5f, -1.25f, 3.0f, 1e-3f, 65504.0f, -0.0f};
  REQUIRE(fv.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(float_bits(fv[i]) == float_bits(want[i]));

  const Tensor iv = read_npy(TESSERA_SOURCE_DIR "/tests/data/numpy_i64_vec.npy");
  CHECK(iv.dtype() == DType::i64);
  CHECK(iv.shape() == Shape{7});
  CHECK(iv.to_i64() == std::vector<int64_t>{0, 1, -1, int64_t{1} << 40, std::numeric_limits<int64_t>::min(),
                                            std::numeric_limits<int64_t>::max(), 123456789});
  // What tessera writes for the same arrays is what NumPy wrote, byte for byte.
  CHECK(npy_encode(f) == read_file(TESSERA_SOURCE_DIR "/tests/data/numpy_f32_2x3.npy"));
  CHECK(npy_encode(iv) == read_file(TESSERA_SOURCE_DIR "/tests/data/numpy_i64_vec.npy"));
}

// ------------------------------------------------------------------------------------- tensor

TEST_CASE("tensor: construction views reshape and shape helpers", "[tensor]") {
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({2, 3, 4}) == 24);
  CHECK(shape_numel({2, 0}) == 0);
  CHECK(shape_str({}) == "[]");
  CHECK(shape_str({2, 3, 4}) == "[2, 3, 4]");

  Tensor z(DType::i32, {2, 3});
  CHECK(z.numel() == 6);
  CHECK(z.nbytes() == 24);
  CHECK(z.rank() == 2);
  for (int32_t v : z.as<int32_t>()) CHECK(v == 0);
  CHECK_THROWS_AS(z.as<float>(), std::logic_error);
  CHECK_THROWS_AS(z.as<int64_t>(), std::logic_error);
  CHECK_THROWS_AS(Tensor(DType::f32, {2, -1}), std::logic_error);
  CHECK_THROWS_AS(Tensor::from_f32({2, 2}, {1, 2, 3}), std::logic_error);
  CHECK_THROWS_AS(Tensor::from_i64({3}, {1, 2}), std::logic_error);

  Tensor h(DType::bf16, {4});
  CHECK(h.as<uint16_t>().size() == 4);  // raw-bit views of the narrow float formats
  CHECK(Tensor(DType::f8e4m3, {3}).as<uint8_t>().size() == 3);
  CHECK_THROWS_AS(Tensor(DType::i16, {3}).as<uint16_t>(), std::logic_error);

  const Tensor s = Tensor::scalar_f32(2.5f);
  CHECK(s.rank() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.to_f32() == std::vector<float>{2.5f});

  const Tensor t = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor r = t.reshaped({3, 1, 2});
  CHECK(r.shape() == Shape{3, 1, 2});
  CHECK(r.to_f32() == t.to_f32());
  CHECK_THROWS_AS(t.reshaped({4}), std::logic_error);
  CHECK_FALSE(r == t);
  CHECK(r.reshaped({2, 3}) == t);
}

TEST_CASE("tensor: cast fp32 -> bf16 -> fp32 and other float formats round to nearest even", "[tensor]") {
  const float one = 1.0f;
  const std::vector<float> x = {
      one,
      one + std::ldexp(1.0f, -8),      // tie between 1 and 1+2^-7: even -> 1
      one + 3 * std::ldexp(1.0f, -8),  // tie between 1+2^-7 (odd) and 1+2^-6: -> 1+2^-6
      std::nextafter(one + std::ldexp(1.0f, -8), 2.0f),  // just above the tie -> 1+2^-7
      0.1f, -3.14159265f, 1e-40f, -0.0f,
      bits_float(0x7f7f8000u),         // overflow tie -> inf
      bits_float(0x7f7f7fffu),         // just below -> max finite
      INFINITY, NAN};
  const Tensor t = Tensor::from_f32({static_cast<int64_t>(x.size())}, x);
  const Tensor b = t.cast(DType::bf16);
  CHECK(b.dtype() == DType::bf16);
  CHECK(b.shape() == t.shape());
  const auto bits = b.as<uint16_t>();
  CHECK(bits[0] == 0x3f80);
  CHECK(bits[1] == 0x3f80);
  CHECK(bits[2] == 0x3f82);
  CHECK(bits[3] == 0x3f81);
  CHECK(bits[4] == 0x3dcd);   // 0.1f = 0x3dcccccd
  CHECK(bits[5] == 0xc049);   // -3.1415927 = 0xc0490fdb
  CHECK(bits[6] == 0x0001);   // 1e-40f = 0x000116c2 (subnormal): rounds down
  CHECK(bits[7] == 0x8000);
  CHECK(bits[8] == 0x7f80);
  CHECK(bits[9] == 0x7f7f);
  CHECK(bits[10] == 0x7f80);
  CHECK(std::isnan(bf16_to_fp32(bits[11])));
  const auto back = b.cast(DType::f32).to_f32();
  for (size_t i = 0; i < x.size(); ++i) CHECK(same_float(back[i], round_to(x[i], FloatFormat::bf16)));

  // Every narrow format, from f32 and from f64 sources.
  const Tensor d = Tensor::from_f32({static_cast<int64_t>(x.size())}, x).cast(DType::f64);
  CHECK(d.dtype() == DType::f64);
  for (DType dt : {DType::f16, DType::bf16, DType::cbf16, DType::f8e4m3, DType::f8e5m2}) {
    INFO(dtype_name(dt));
    const auto f = *float_format(dt);
    const auto via_f32 = t.cast(dt).to_f32();
    const auto via_f64 = d.cast(dt).to_f32();
    for (size_t i = 0; i < x.size(); ++i) {
      CHECK(same_float(via_f32[i], round_to(x[i], f)));
      CHECK(same_float(via_f64[i], round_to(x[i], f)));
    }
  }
  // e4m3 overflow is NaN (non-saturating), as documented.
  CHECK(std::isnan(Tensor::scalar_f32(1000.0f).cast(DType::f8e4m3).to_f32()[0]));
  // f64 -> f32 rounds to nearest.
  const Tensor p = Tensor::from_f32({1}, {0.0f}).cast(DType::f64);
  Tensor q(DType::f64, {2});
  q.as<double>()[0] = 0.1;
  q.as<double>()[1] = 1.0 + std::ldexp(1.0, -24);  // tie between 1 and 1+2^-23: even -> 1
  const Tensor qt = q.cast(DType::f32);
  const auto qf = qt.as<float>();
  CHECK(qf[0] == 0.1f);
  CHECK(qf[1] == 1.0f);
  CHECK(p.as<double>()[0] == 0.0);
  // Same dtype: a copy.
  CHECK(t.cast(DType::f32).to_f32().size() == x.size());
  CHECK(b.cast(DType::bf16) == b);
}

TEST_CASE("tensor: cast from floats to integers truncates and saturates with NaN -> 0", "[tensor]") {
  const std::vector<float> x = {2.7f, -2.7f, 127.9f, -128.9f, 300.5f, -300.5f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, -0.0f};
  for (DType src : {DType::f32, DType::f64, DType::bf16}) {
    INFO("from " << dtype_name(src));
    const Tensor t = Tensor::from_f32({static_cast<int64_t>(x.size())}, x).cast(src);
    const Tensor t8 = t.cast(DType::i8), tu8 = t.cast(DType::u8), t16 = t.cast(DType::i16);
    const Tensor t32 = t.cast(DType::i32), t64 = t.cast(DType::i64);
    const auto i8 = t8.as<int8_t>();
    const std::vector<int8_t> want_i8 = {2, -2, 127, -128, 127, -128, 127, -128, 127, -128, 0, 0};
    // bf16 rounds 127.9 -> 128 and -128.9 -> -129 first; both saturate to the same results.
    CHECK(std::vector<int8_t>(i8.begin(), i8.end()) == want_i8);
    const auto u8 = tu8.as<uint8_t>();
    const std::vector<uint8_t> want_u8 = {2, 0, src == DType::bf16 ? uint8_t{128} : uint8_t{127}, 0, 255, 0, 255, 0, 255, 0, 0, 0};
    CHECK(std::vector<uint8_t>(u8.begin(), u8.end()) == want_u8);
    const auto i16 = t16.as<int16_t>();
    CHECK(i16[4] == 300);
    CHECK(i16[6] == std::numeric_limits<int16_t>::max());
    CHECK(i16[7] == std::numeric_limits<int16_t>::min());
    CHECK(i16[10] == 0);
    const auto i32 = t32.as<int32_t>();
    CHECK(i32[1] == -2);
    CHECK(i32[6] == std::numeric_limits<int32_t>::max());
    CHECK(i32[9] == std::numeric_limits<int32_t>::min());
    const auto i64 = t64.as<int64_t>();
    CHECK(i64[0] == 2);
    CHECK(i64[6] == std::numeric_limits<int64_t>::max());
    CHECK(i64[7] == std::numeric_limits<int64_t>::min());
    CHECK(i64[8] == std::numeric_limits<int64_t>::max());
    CHECK(i64[10] == 0);
    CHECK(t.to_i64() == std::vector<int64_t>(i64.begin(), i64.end()));
  }
  // Edges of int32: 2^31 - 128 is the largest fp32 below 2^31; 2^31 itself saturates.
  const Tensor e = Tensor::from_f32({3}, {2147483520.0f, 2147483648.0f, -2147483648.0f});
  const Tensor et = e.cast(DType::i32);
  const auto e32 = et.as<int32_t>();
  CHECK(e32[0] == 2147483520);
  CHECK(e32[1] == std::numeric_limits<int32_t>::max());
  CHECK(e32[2] == std::numeric_limits<int32_t>::min());
  // Integer -> float and integer -> integer (in range).
  const Tensor iv = Tensor::from_i64({4}, {-5, 0, 100, 16777217});
  const auto f = iv.cast(DType::f32).to_f32();
  CHECK(f == std::vector<float>{-5.0f, 0.0f, 100.0f, 16777216.0f});  // 2^24+1 rounds to even
  const Tensor it8 = iv.cast(DType::i16).cast(DType::i8);
  const auto i8 = it8.as<int8_t>();
  CHECK(i8[0] == -5);
  CHECK(i8[2] == 100);
  CHECK(iv.cast(DType::f64).to_f64() == std::vector<double>{-5, 0, 100, 16777217});
}

TEST_CASE("tensor: cast to and from bool", "[tensor]") {
  const Tensor t = Tensor::from_f32({6}, {0.0f, -0.0f, 0.5f, -3.0f, NAN, INFINITY});
  const auto b = t.cast(DType::boolean);
  CHECK(b.dtype() == DType::boolean);
  CHECK(b.to_i64() == std::vector<int64_t>{0, 0, 1, 1, 1, 1});  // NaN is truthy, as in NumPy
  const auto raw = b.as<bool>();
  CHECK_FALSE(raw[0]);
  CHECK(raw[2]);
  CHECK(b.cast(DType::f32).to_f32() == std::vector<float>{0, 0, 1, 1, 1, 1});
  CHECK(b.cast(DType::i64).to_i64() == std::vector<int64_t>{0, 0, 1, 1, 1, 1});
  CHECK(b.cast(DType::bf16).to_f32() == std::vector<float>{0, 0, 1, 1, 1, 1});
  const Tensor i = Tensor::from_i64({3}, {0, -7, 256});
  CHECK(i.cast(DType::boolean).to_i64() == std::vector<int64_t>{0, 1, 1});
}

// ------------------------------------------------------------------------------------ compare

TEST_CASE("tensor: ulp_distance counts representable fp32 values", "[tensor][compare]") {
  CHECK(ulp_distance(1.0f, 1.0f) == 0);
  CHECK(ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)) == 1);
  CHECK(ulp_distance(std::nextafter(1.0f, 2.0f), 1.0f) == 1);
  CHECK(ulp_distance(1.0f, 2.0f) == (uint64_t{1} << 23));
  CHECK(ulp_distance(0.0f, -0.0f) == 0);
  const float dm = std::numeric_limits<float>::denorm_min();
  CHECK(ulp_distance(dm, -dm) == 2);
  CHECK(ulp_distance(0.0f, dm) == 1);
  CHECK(ulp_distance(-1.0f, 1.0f) == 2 * uint64_t{0x3f800000});
  CHECK(ulp_distance(std::numeric_limits<float>::max(), INFINITY) == 1);
  CHECK(ulp_distance(NAN, 1.0f) == UINT64_MAX);
  CHECK(ulp_distance(1.0f, NAN) == UINT64_MAX);
  CHECK(ulp_distance(NAN, -NAN) == 0);
}

TEST_CASE("tensor: compare reports max abs/rel error and ULPs and the worst element", "[tensor][compare]") {
  const std::vector<float> e = {1.0f, 2.0f, 0.0f, -4.0f, 100.0f};
  const std::vector<float> a = {1.0f, 2.5f, 0.125f, -4.0f, 101.0f};
  const Comparison c = compare(std::span<const float>(a), std::span<const float>(e), 0.0, 0.0);
  CHECK(c.max_abs_error == 1.0);                    // 101 vs 100
  CHECK(c.max_rel_error == 0.25);                   // 2.5 vs 2
  CHECK(c.max_ulp == ulp_distance(0.125f, 0.0f));   // 0.125 vs 0: the largest distance
  CHECK(c.mismatches == 3);
  CHECK(c.worst_index == 4);                        // largest |a-e| - bound
  CHECK(c.shapes_match);
  CHECK_FALSE(c.pass);

  const Comparison ok = compare(std::span<const float>(a), std::span<const float>(e), 0.25, 0.125);
  CHECK(ok.mismatches == 0);  // bounds: 0.375, 0.625, 0.125, 1.125, 25.125 -- all met, 2 exactly
  CHECK(ok.pass);
  CHECK(ok.max_abs_error == 1.0);
  CHECK(ok.worst_index == 2);  // 0.125 - 0.125 = 0 is the least slack

  const Comparison same = compare(std::span<const float>(e), std::span<const float>(e), 0.0, 0.0);
  CHECK(same.pass);
  CHECK(same.max_abs_error == 0.0);
  CHECK(same.max_rel_error == 0.0);
  CHECK(same.max_ulp == 0);
}

TEST_CASE("tensor: compare follows numpy.allclose incl NaN and inf and shape mismatch", "[tensor][compare]") {
  auto cmp = [](std::vector<float> a, std::vector<float> e, double rtol, double atol) {
    return compare(std::span<const float>(a), std::span<const float>(e), rtol, atol);
  };
  // |a - e| <= atol + rtol * |e|: the bound scales with the expected value only (not symmetric).
  CHECK(cmp({1.5f}, {1.0f}, 0.25, 0.25).pass);
  CHECK_FALSE(cmp({std::nextafter(1.5f, 2.0f)}, {1.0f}, 0.25, 0.25).pass);
  CHECK(cmp({10.0f}, {8.0f}, 0.25, 0.0).pass);         // 2 <= 0.25 * 8
  CHECK(cmp({8.0f}, {10.0f}, 0.2, 0.0).pass);          // 2 <= 0.2 * 10
  CHECK_FALSE(cmp({10.0f}, {8.0f}, 0.2, 0.0).pass);    // 2 > 0.2 * 8
  CHECK(cmp({1e-9f}, {0.0f}, 0.0, 1e-8).pass);         // atol covers values near zero
  CHECK_FALSE(cmp({1e-7f}, {0.0f}, 1.0, 1e-8).pass);   // rtol does not help when e == 0
  // NaN equals NaN only in the same position.
  const Comparison nn = cmp({NAN, 1.0f}, {NAN, 1.0f}, 0.0, 0.0);
  CHECK(nn.pass);
  CHECK(nn.max_abs_error == 0.0);
  const Comparison n1 = cmp({NAN, 1.0f}, {1.0f, NAN}, 1.0, 1.0);
  CHECK_FALSE(n1.pass);
  CHECK(n1.mismatches == 2);
  CHECK(n1.max_ulp == UINT64_MAX);
  CHECK(std::isinf(n1.max_abs_error));
  const Comparison n2 = cmp({1.0f, 2.0f, 3.0f}, {1.0f, NAN, 3.0f}, 0.1, 0.1);
  CHECK(n2.mismatches == 1);
  CHECK(n2.worst_index == 1);
  // Infinities are close only to the same infinity, whatever the tolerances.
  CHECK(cmp({INFINITY, -INFINITY}, {INFINITY, -INFINITY}, 0.0, 0.0).pass);
  CHECK(cmp({INFINITY}, {INFINITY}, 1e-5, 1e-8).pass);
  CHECK_FALSE(cmp({-INFINITY}, {INFINITY}, 1e-5, 1e-8).pass);
  CHECK_FALSE(cmp({1.0f}, {INFINITY}, 1e-5, 1e-8).pass);
  CHECK_FALSE(cmp({1.0f}, {INFINITY}, 1.0, 1.0).pass);
  CHECK_FALSE(cmp({INFINITY}, {1.0f}, 1.0, 1.0).pass);
  const Comparison ci = cmp({0.0f, 1.0f, 3.0f}, {0.0f, INFINITY, 3.0f}, 0.5, 0.5);
  CHECK(ci.mismatches == 1);
  CHECK(ci.worst_index == 1);
  // Sizes and shapes.
  const Comparison sz = cmp({1.0f, 2.0f}, {1.0f, 2.0f, 3.0f}, 1.0, 1.0);
  CHECK_FALSE(sz.shapes_match);
  CHECK_FALSE(sz.pass);
  const Tensor t23 = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor t32 = t23.reshaped({3, 2});
  const Comparison sh = compare(t23, t32, 1.0, 1.0);
  CHECK_FALSE(sh.shapes_match);
  CHECK_FALSE(sh.pass);
  CHECK(compare(t23, t23, 0.0, 0.0).pass);
  CHECK(cmp({}, {}, 0.0, 0.0).pass);
  // Tensors of different dtypes compare through fp32: bf16 rounding of 1/3 is within 2^-8 rel.
  const Tensor third = Tensor::from_f32({2, 3}, {1.0f / 3, 2, 3, 4, 5, 6});
  const Tensor third_bf16 = third.cast(DType::bf16);
  CHECK(compare(third_bf16, third, std::ldexp(1.0, -8), 0.0).pass);
  const Comparison tight = compare(third_bf16, third, 0.0, 0.0);
  CHECK_FALSE(tight.pass);
  CHECK(tight.mismatches == 1);
  CHECK(tight.worst_index == 0);
  CHECK(tight.max_ulp == ulp_distance(round_to(1.0f / 3, FloatFormat::bf16), 1.0f / 3));
}
