#pragma once
// Reads a trace back: Perfetto protobuf (.pftrace, our own wire decoder, the subset in
// perfetto_subset.proto) or Chrome JSON. Used by the tests and by `tessera trace-summary`.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "traces/trace_builder.hpp"

namespace tessera::traces {

struct Track {
  enum class Kind { process, thread, counter, custom };
  uint64_t uuid = 0;
  uint64_t parent = 0;  // 0: none
  std::string name;
  Kind kind = Kind::custom;
  int32_t pid = 0, tid = 0;
  int unit = 0;  // Perfetto CounterDescriptor.unit (0 unspecified, 1 ns, 2 count, 3 bytes)
};

struct Slice {
  uint64_t track = 0;
  std::string name;
  int64_t begin_ns = 0, end_ns = 0;
  int depth = 0;  // nesting depth on its track (0 = top level)
  std::vector<Arg> args;
  std::vector<uint64_t> flow_out, flow_in;
  int64_t dur_ns() const { return end_ns - begin_ns; }
  const Arg* arg(std::string_view name) const;
};

struct Instant {
  uint64_t track = 0;
  std::string name;
  int64_t ts_ns = 0;
  std::vector<Arg> args;
};

struct CounterPoint {
  uint64_t track = 0;
  int64_t ts_ns = 0;
  double value = 0;
};

struct Trace {
  std::vector<Track> tracks;          // in declaration order
  std::vector<Slice> slices;          // in begin order of the file
  std::vector<Instant> instants;
  std::vector<CounterPoint> counters; // in file order
  size_t packets = 0;

  const Track* track(uint64_t uuid) const;
  // The first track with this name (and, when given, this parent); nullptr if none.
  const Track* find(std::string_view name, uint64_t parent = 0) const;
  // "process / thread" for a thread or counter track under a process, else the track's name.
  std::string path(uint64_t uuid) const;
};

// Parses .pftrace bytes. Throws std::runtime_error on malformed input (a truncated field, an
// interned id never defined, a slice end without a begin, a slice left open).
Trace read_perfetto(std::string_view bytes);
// Parses Chrome JSON (X, B/E, i, C, M, s/f events).
Trace read_chrome_json(std::string_view text);
// Reads a file in either format (JSON if it starts with '{' or '['); InputError naming the path if
// it cannot be read or parsed.
Trace read_trace_file(const std::string& path);

// The `tessera trace-summary` text: tracks with slice counts and busy time, counters, flows and the
// top slice names (instructions) by total time.
std::string summarize(const Trace& t, size_t top = 15);

}  // namespace tessera::traces
