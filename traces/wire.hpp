#pragma once
// A small protobuf wire-format encoder and decoder (https://protobuf.dev/programming-guides/encoding/):
// enough for the Perfetto trace subset in perfetto_subset.proto, with no libprotobuf at runtime.
//
// Encoding: a field is a key varint (field_number << 3 | wire_type) followed by its payload:
// wire type 0 = varint (int32/int64/uint64/bool/enum; negative int64 as 10-byte two's complement),
// 1 = fixed64 (little-endian; double, fixed64), 2 = length-delimited (a varint length then bytes:
// strings, bytes, nested messages, packed repeated scalars), 5 = fixed32.
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::traces::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Appends fields to a byte string. Nested messages are built in their own Writer and added with
// message(); that costs a copy per level, which is fine for trace packets (a few levels, small).
class Writer {
 public:
  void varint(uint32_t field, uint64_t v);
  void int64(uint32_t field, int64_t v) { varint(field, static_cast<uint64_t>(v)); }
  void boolean(uint32_t field, bool v) { varint(field, v ? 1 : 0); }
  void fixed64(uint32_t field, uint64_t v);
  void dbl(uint32_t field, double v);
  void bytes(uint32_t field, std::string_view b);  // strings, bytes
  void message(uint32_t field, const Writer& m) { bytes(field, m.data()); }

  const std::string& data() const { return buf_; }
  std::string& data() { return buf_; }
  size_t size() const { return buf_.size(); }
  bool empty() const { return buf_.empty(); }
  void clear() { buf_.clear(); }

  static void put_varint(std::string& out, uint64_t v);
  static size_t varint_size(uint64_t v);

 private:
  void key(uint32_t field, WireType t) { put_varint(buf_, (static_cast<uint64_t>(field) << 3) | t); }
  std::string buf_;
};

// One decoded field. For kLengthDelimited, `bytes` views the payload inside the decoded buffer.
struct Field {
  uint32_t number = 0;
  WireType type = kVarint;
  uint64_t value = 0;  // varint, fixed64, fixed32
  std::string_view bytes;

  int64_t as_int64() const { return static_cast<int64_t>(value); }
  double as_double() const;
};

// Walks the fields of one message. next() returns false at the end; a malformed buffer (a
// truncated varint or payload, an unknown wire type) throws std::runtime_error naming the offset.
class Reader {
 public:
  explicit Reader(std::string_view buf) : buf_(buf) {}
  bool next(Field& f);
  size_t offset() const { return pos_; }

 private:
  uint64_t read_varint();
  std::string_view buf_;
  size_t pos_ = 0;
};

}  // namespace tessera::traces::wire
