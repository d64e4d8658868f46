#include "isa/npy.hpp"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "isa/error.hpp"
#include "isa/fileio.hpp"

namespace tessera {

namespace {

struct DescrRow {
  const char* descr;
  DType dtype;
};
// '|' and '<' both accepted on read for single-byte types.
constexpr DescrRow kDescr[] = {
    {"<f4", DType::f32}, {"<f8", DType::f64}, {"<f2", DType::f16}, {"<i8", DType::i64},
    {"<i4", DType::i32}, {"<i2", DType::i16}, {"|i1", DType::i8},  {"|u1", DType::u8},
    {"|b1", DType::boolean},
};

const char* descr_for(DType t) {
  for (const auto& r : kDescr)
    if (r.dtype == t) return r.descr;
  return nullptr;
}

[[noreturn]] void bad(const std::string& name, const std::string& field, const std::string& msg,
                      const std::string& hint = "tessera reads .npy v1.0-3.0, little-endian, C order; "
                                                "re-save with numpy.save(path, np.ascontiguousarray(a))") {
  throw InputError(name + (field.empty() ? "" : " (header field '" + field + "')"), msg, hint);
}

// A tiny reader for the header's Python dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& name) : s_(s), name_(name) {}

  void parse(std::string& descr, bool& fortran, Shape& shape) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip();
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') break;
      std::string key = quoted("");
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        descr = quoted("descr");
        seen_descr = true;
      } else if (key == "fortran_order") {
        if (s_.substr(i_, 4) == "True") {
          fortran = true;
          i_ += 4;
        } else if (s_.substr(i_, 5) == "False") {
          fortran = false;
          i_ += 5;
        } else {
          bad(name_, "fortran_order", "expected True or False");
        }
        seen_fortran = true;
      } else if (key == "shape") {
        expect('(');
        while (true) {
          skip();
          if (peek() == ')') {
            ++i_;
            break;
          }
          size_t start = i_;
          while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
          if (start == i_) bad(name_, "shape", "expected a non-negative integer dimension");
          if (i_ - start > 18) bad(name_, "shape", "dimension " + std::string(s_.substr(start, i_ - start)) + " is too large");
          shape.push_back(std::stoll(std::string(s_.substr(start, i_ - start))));
          skip();
          if (peek() == ',') ++i_;
        }
        seen_shape = true;
      } else {
        bad(name_, key, "unknown header key '" + key + "'");
      }
      skip();
      if (peek() == ',') ++i_;
    }
    if (!seen_descr) bad(name_, "descr", "missing");
    if (!seen_fortran) bad(name_, "fortran_order", "missing");
    if (!seen_shape) bad(name_, "shape", "missing");
  }

 private:
  char peek() {
    if (i_ >= s_.size()) bad(name_, "", "header ends early");
    return s_[i_];
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(name_, "", std::string("malformed header: expected '") + c + "'");
    ++i_;
  }
  std::string quoted(const std::string& field) {
    char q = peek();
    if (q != '\'' && q != '"') bad(name_, field, "expected a quoted string");
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) bad(name_, field, "unterminated string");
    std::string r(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return r;
  }
  std::string_view s_;
  const std::string& name_;
  size_t i_ = 0;
};

}  // namespace

std::string npy_encode(const Tensor& t0) {
  const Tensor* t = &t0;
  Tensor widened;
  if (!descr_for(t0.dtype())) {  // bf16/cbf16/fp8: widen exactly to fp32
    widened = t0.cast(DType::f32);
    t = &widened;
  }
  std::string shape = "(";
  for (size_t i = 0; i < t->shape().size(); ++i) shape += std::to_string(t->shape()[i]) + ", ";
  if (t->shape().size() > 1) shape.resize(shape.size() - 2);
  else if (t->shape().size() == 1) shape.resize(shape.size() - 1);  // "(5,)"
  shape += ")";
  std::string header = std::string("{'descr': '") + descr_for(t->dtype()) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that magic + version + length + header is a multiple of 64, ending in '\n'.
  size_t pre = 10;
  size_t total = pre + header.size() + 1;
  bool v2 = false;
  if (((total + 63) / 64) * 64 - pre > 65535) {
    v2 = true;
    pre = 12;
    total = pre + header.size() + 1;
  }
  header.append(((total + 63) / 64) * 64 - total, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(v2 ? 2 : 1);
  out += static_cast<char>(0);
  const uint32_t len = static_cast<uint32_t>(header.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (v2) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  out += header;
  out.append(reinterpret_cast<const char*>(t->data()), t->nbytes());
  return out;
}

namespace {

// The header of a .npy whose first bytes are `b` and whose whole size is `total`: the dtype, the
// shape and where the data starts; checks that the data is exactly as long as the shape needs.
NpyInfo decode_header(std::string_view b, size_t total, const std::string& name) {
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0)
    bad(name, "", "not a .npy file (magic string \\x93NUMPY missing)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(b[8]) | (static_cast<size_t>(static_cast<unsigned char>(b[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) bad(name, "", "file ends inside the header length");
    hlen = 0;
    for (int i = 0; i < 4; ++i) hlen |= static_cast<size_t>(static_cast<unsigned char>(b[8 + i])) << (8 * i);
    hstart = 12;
  } else {
    bad(name, "version", "format version " + std::to_string(major) + "." +
                             std::to_string(static_cast<unsigned char>(b[7])) + " is not supported");
  }
  if (hstart + hlen > b.size()) bad(name, "", "file ends inside the header");
  std::string descr;
  bool fortran = false;
  Shape shape;
  HeaderParser(b.substr(hstart, hlen), name).parse(descr, fortran, shape);
  if (fortran) bad(name, "fortran_order", "Fortran-order arrays are not supported");
  if (descr.size() == 3 && descr[0] == '>' ) bad(name, "descr", "'" + descr + "' is big-endian");
  std::string d = descr;
  if (d.size() == 3 && d[0] == '<' && d[2] == '1') d[0] = '|';
  if (d.size() == 3 && d[0] == '=') d[0] = d[2] == '1' ? '|' : '<';
  const DescrRow* row = nullptr;
  for (const auto& r : kDescr)
    if (d == r.descr) row = &r;
  if (!row) bad(name, "descr", "dtype '" + descr + "' is not supported (supported: <f4 <f8 <f2 <i8 <i4 <i2 |i1 |u1 |b1)");
  // Check the size before allocating: a corrupt shape must be reported, not allocated (nor may its
  // byte count overflow to something that happens to match).
  // Tensor multiplies every dimension in int64: an empty shape like (10^6, 10^6, 10^7, 0) holds no
  // data yet must not overflow that product either.
  int64_t nonzero = 1;
  for (int64_t dim : shape)
    if (dim != 0 && __builtin_mul_overflow(nonzero, dim, &nonzero))
      bad(name, "shape", "shape " + shape_str(shape) + " has more elements than a 64-bit count holds",
          "the header is corrupt");
  const size_t data_start = hstart + hlen;
  const size_t have = total - data_start;
  size_t need = dtype_size(row->dtype);
  bool fits = true;
  for (int64_t dim : shape) {
    const auto len = static_cast<size_t>(dim);
    if (len == 0) {
      need = 0;
      fits = true;
      break;
    }
    if (need > have / len) fits = false;  // need * len > have, whatever the later dimensions
    else need *= len;
  }
  double need_d = static_cast<double>(dtype_size(row->dtype));  // for the message (no overflow)
  for (int64_t dim : shape) need_d *= static_cast<double>(dim);
  char need_s[32];
  std::snprintf(need_s, sizeof need_s, need_d < 1e18 ? "%.0f" : "%.3g", need_d);
  if (!fits || need != have)
    bad(name, "shape", "data holds " + std::to_string(have) + " bytes but shape " + shape_str(shape) + " of " +
                           descr + " needs " + need_s,
        "the file is truncated or its header is wrong");
  return {row->dtype, shape, data_start};
}

}  // namespace

Tensor npy_decode(const std::string& b, const std::string& name) {
  const NpyInfo info = decode_header(b, b.size(), name);
  Tensor t(info.dtype, info.shape);
  if (t.nbytes() > 0) std::memcpy(t.data(), b.data() + info.data_offset, t.nbytes());
  return t;
}

NpyInfo read_npy_info(const std::string& path) {
  // The header is at most 4 GiB in principle; real ones are under 64 KiB.
  const std::string head = read_file_prefix(path, 1 << 16);
  std::error_code ec;
  const auto total = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(path, "cannot read the file size: " + ec.message());
  return decode_header(head, static_cast<size_t>(total), path);
}

Tensor read_npy(const std::string& path) { return npy_decode(read_file(path), path); }

void write_npy(const std::string& path, const Tensor& t) { write_file_atomic(path, npy_encode(t)); }

}  // namespace tessera
