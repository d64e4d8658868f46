#include "traces/wire.hpp"

#include <cstring>
#include <stdexcept>

namespace tessera::traces::wire {

void Writer::put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

size_t Writer::varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void Writer::varint(uint32_t field, uint64_t v) {
  key(field, kVarint);
  put_varint(buf_, v);
}

void Writer::fixed64(uint32_t field, uint64_t v) {
  key(field, kFixed64);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void Writer::dbl(uint32_t field, double v) {
  uint64_t bits = 0;
  static_assert(sizeof bits == sizeof v);
  std::memcpy(&bits, &v, sizeof bits);
  fixed64(field, bits);
}

void Writer::bytes(uint32_t field, std::string_view b) {
  key(field, kLengthDelimited);
  put_varint(buf_, b.size());
  buf_.append(b.data(), b.size());
}

double Field::as_double() const {
  double d = 0;
  std::memcpy(&d, &value, sizeof d);
  return d;
}

uint64_t Reader::read_varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= buf_.size()) throw std::runtime_error("truncated varint at byte " + std::to_string(pos_));
    const auto b = static_cast<uint8_t>(buf_[pos_++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  throw std::runtime_error("varint longer than 10 bytes at byte " + std::to_string(pos_));
}

bool Reader::next(Field& f) {
  if (pos_ >= buf_.size()) return false;
  const size_t at = pos_;
  const uint64_t k = read_varint();
  f.number = static_cast<uint32_t>(k >> 3);
  f.type = static_cast<WireType>(k & 7);
  f.value = 0;
  f.bytes = {};
  if (f.number == 0) throw std::runtime_error("field number 0 at byte " + std::to_string(at));
  switch (f.type) {
    case kVarint: f.value = read_varint(); break;
    case kFixed64:
    case kFixed32: {
      const size_t n = f.type == kFixed64 ? 8 : 4;
      if (buf_.size() - pos_ < n) throw std::runtime_error("truncated fixed field at byte " + std::to_string(at));
      for (size_t i = 0; i < n; ++i) f.value |= static_cast<uint64_t>(static_cast<uint8_t>(buf_[pos_ + i])) << (8 * i);
      pos_ += n;
      break;
    }
    case kLengthDelimited: {
      const uint64_t n = read_varint();
      if (n > buf_.size() - pos_)
        throw std::runtime_error("length-delimited field " + std::to_string(f.number) + " at byte " + std::to_string(at) +
                                 " runs past the end of its message");
      f.bytes = buf_.substr(pos_, static_cast<size_t>(n));
      pos_ += static_cast<size_t>(n);
      break;
    }
    default:
      throw std::runtime_error("unsupported wire type " + std::to_string(static_cast<int>(f.type)) + " at byte " +
                               std::to_string(at));
  }
  return true;
}

}  // namespace tessera::traces::wire
