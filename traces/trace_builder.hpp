#pragma once
// A format-neutral trace: processes, thread tracks, counter tracks, slices, instants, counter values
// and flows, written out as Perfetto protobuf (.pftrace, see perfetto_subset.proto) or Chrome JSON.
//
// Times are nanoseconds (see traces/README.md for why: the models run on a femtosecond timeline
// with several clock domains, so renderers round to ns and put exact cycle numbers in args).
//
// Rules for callers: slices on one track must nest (a slice that starts inside another ends inside
// it); overlapping work goes on separate tracks. Output is deterministic: the same calls give the
// same bytes. Events are written sorted by time (ties: call order within a track, nesting kept).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace tessera::traces {

struct Arg {
  std::string name;
  std::variant<int64_t, double, std::string> value;
  bool operator==(const Arg&) const = default;
};

class TraceBuilder {
 public:
  // A process track; returns its uuid. Pids are unique in a trace.
  uint64_t process(const std::string& name, int32_t pid);
  // A thread track under a process track. Tids are unique across the whole trace: Perfetto
  // identifies a thread by its tid, and the same tid under two pids reads as tid reuse.
  uint64_t thread(uint64_t process_uuid, const std::string& name, int32_t tid);
  // A counter track under a process (or thread) track. `unit` is free text ("GB/s", "bytes"):
  // "bytes", "ns" and "count" map onto Perfetto's unit enum; any unit is kept in the Chrome JSON.
  uint64_t counter(uint64_t parent_uuid, const std::string& name, const std::string& unit);

  // A slice [begin_ns, end_ns] on a process or thread track. flow_out: flow ids that start at this
  // slice; flow_in: flow ids that end here (each id has exactly one source and one destination).
  void slice(uint64_t track, const std::string& name, int64_t begin_ns, int64_t end_ns, std::vector<Arg> args = {},
             std::vector<uint64_t> flow_out = {}, std::vector<uint64_t> flow_in = {});
  void instant(uint64_t track, const std::string& name, int64_t ts_ns, std::vector<Arg> args = {});
  void counter_value(uint64_t counter_track, int64_t ts_ns, double value);

  // Size control: once the estimated encoded size passes `bytes`, further slices and instants are
  // dropped and counted (counter values and tracks are always kept). 0 = no budget (default).
  void set_byte_budget(size_t bytes) { budget_ = bytes; }
  size_t dropped() const { return dropped_; }
  size_t slices() const { return slices_.size(); }
  // A one-line warning when the budget trimmed the trace ("" otherwise).
  std::string warning() const;
  // Estimated size of the Perfetto encoding so far (what the budget is compared with).
  size_t estimated_bytes() const { return estimate_; }

  std::string perfetto_bytes() const;  // the .pftrace contents
  std::string chrome_json() const;     // Chrome JSON: ph X slices, i instants, C counters, M names, s/f flows; ts in us

 private:
  enum class Kind : uint8_t { process, thread, counter };
  struct Track {
    uint64_t uuid, parent;
    std::string name, unit;
    Kind kind;
    int32_t pid, tid;
  };
  struct StoredArg {  // strings as indices into strings_ (loops repeat them a lot)
    uint32_t name;
    std::variant<int64_t, double, uint32_t> value;
  };
  struct Event {  // a slice (end >= begin) or an instant
    uint64_t track;
    uint32_t name;  // index into strings_
    bool instant;
    int64_t begin, end;
    std::vector<StoredArg> args;
    std::vector<uint64_t> flow_out, flow_in;
  };
  struct CounterPoint {
    uint64_t track;
    int64_t ts;
    double value;
  };
  uint64_t add_track(Track t);
  const Track& track(uint64_t uuid, const char* what) const;
  uint32_t intern(const std::string& s);
  std::vector<StoredArg> store(std::vector<Arg>& args, size_t& bytes);
  bool admit(size_t bytes);

  std::vector<Track> tracks_;  // uuid = index + 1
  std::vector<std::string> strings_;  // event names, arg names and string values, each once
  std::unordered_map<std::string, uint32_t> string_index_;
  std::vector<Event> slices_;
  std::vector<CounterPoint> counters_;
  size_t budget_ = 0, dropped_ = 0, estimate_ = 0;
};

}  // namespace tessera::traces
