#include "traces/trace_builder.hpp"

#include "isa/interrupt.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "traces/wire.hpp"

namespace tessera::traces {

namespace {

// Field numbers (perfetto_subset.proto, checked against google/perfetto's protos).
namespace f {
constexpr uint32_t kTracePacket = 1;             // Trace.packet
constexpr uint32_t kTimestamp = 8;               // TracePacket.timestamp
constexpr uint32_t kSequenceId = 10;             // TracePacket.trusted_packet_sequence_id
constexpr uint32_t kTrackEvent = 11;             // TracePacket.track_event
constexpr uint32_t kInternedData = 12;           // TracePacket.interned_data
constexpr uint32_t kSequenceFlags = 13;          // TracePacket.sequence_flags
constexpr uint32_t kTrackDescriptor = 60;        // TracePacket.track_descriptor
constexpr uint32_t kTdUuid = 1, kTdName = 2, kTdProcess = 3, kTdThread = 4, kTdParent = 5, kTdCounter = 8;
constexpr uint32_t kPdPid = 1, kPdName = 6;      // ProcessDescriptor
constexpr uint32_t kThPid = 1, kThTid = 2, kThName = 5;  // ThreadDescriptor
constexpr uint32_t kCdUnit = 3;                  // CounterDescriptor.unit
constexpr uint32_t kTeAnnotations = 4, kTeType = 9, kTeNameIid = 10, kTeTrack = 11, kTeDoubleCounter = 44,
                   kTeFlowIds = 47, kTeTerminatingFlowIds = 48;
constexpr uint32_t kDaNameIid = 1, kDaInt = 4, kDaDouble = 5, kDaStringIid = 17;
constexpr uint32_t kIdEventNames = 2, kIdAnnotationNames = 3, kIdStringValues = 29;
constexpr uint32_t kIidIid = 1, kIidName = 2;    // EventName/DebugAnnotationName/InternedString: iid, name|str
}  // namespace f

constexpr uint32_t kSequence = 1;
constexpr uint64_t kSeqIncrementalStateCleared = 1, kSeqNeedsIncrementalState = 2;
constexpr uint64_t kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4;

uint64_t unit_enum(const std::string& unit) {
  if (unit == "ns") return 1;      // UNIT_TIME_NS
  if (unit == "count") return 2;   // UNIT_COUNT
  if (unit == "bytes") return 3;   // UNIT_SIZE_BYTES
  return 0;
}

// One event of the output stream: a slice begin/end, an instant or a counter value.
struct Emit {
  int64_t ts;
  size_t track_order;  // index of the track (ties across tracks: track creation order)
  size_t seq;          // order within the track
  uint8_t type;
  size_t index;        // into slices_ or counters_
};

// One interning table of the single packet sequence (keyed by the builder's string index); iids
// in first-use order of the output.
struct Interner {
  Interner(const std::vector<std::string>& strings, uint32_t field) : strings_(strings), iid_(strings.size(), 0), field_(field) {}
  uint64_t get(uint32_t s, wire::Writer& interned) {
    if (iid_[s]) return iid_[s];
    iid_[s] = ++next_;
    entry_.clear();
    entry_.varint(f::kIidIid, iid_[s]);
    entry_.bytes(f::kIidName, strings_[s]);
    interned.message(field_, entry_);
    return iid_[s];
  }

 private:
  const std::vector<std::string>& strings_;
  std::vector<uint64_t> iid_;
  uint64_t next_ = 0;
  uint32_t field_;
  wire::Writer entry_;
};

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out.push_back(hex[(c >> 4) & 0xf]);
          out.push_back(hex[c & 0xf]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  out.append(b, r.ptr);
}

// ns -> microseconds with exactly three decimals ("12.345").
void append_us(std::string& out, int64_t ns) {
  if (ns < 0) {
    out.push_back('-');
    ns = -ns;
  }
  out += std::to_string(ns / 1000);
  const int64_t frac = ns % 1000;
  if (frac) {
    char b[8];
    std::snprintf(b, sizeof b, ".%03lld", static_cast<long long>(frac));
    out += b;
  }
}

}  // namespace

uint64_t TraceBuilder::add_track(Track t) {
  t.uuid = tracks_.size() + 1;
  estimate_ += 24 + t.name.size() * 2;
  tracks_.push_back(std::move(t));
  return tracks_.back().uuid;
}

const TraceBuilder::Track& TraceBuilder::track(uint64_t uuid, const char* what) const {
  if (uuid == 0 || uuid > tracks_.size())
    throw std::invalid_argument(std::string("TraceBuilder::") + what + ": unknown track uuid " + std::to_string(uuid));
  return tracks_[uuid - 1];
}

uint64_t TraceBuilder::process(const std::string& name, int32_t pid) {
  for (const Track& t : tracks_)
    if (t.kind == Kind::process && t.pid == pid)
      throw std::invalid_argument("TraceBuilder::process: pid " + std::to_string(pid) + " of '" + name + "' is already used by '" + t.name + "'");
  return add_track({0, 0, name, {}, Kind::process, pid, 0});
}

uint64_t TraceBuilder::thread(uint64_t process_uuid, const std::string& name, int32_t tid) {
  const Track& p = track(process_uuid, "thread");
  if (p.kind != Kind::process) throw std::invalid_argument("TraceBuilder::thread: the parent of '" + name + "' is not a process track");
  for (const Track& t : tracks_)
    if (t.kind == Kind::thread && t.tid == tid)
      throw std::invalid_argument("TraceBuilder::thread: tid " + std::to_string(tid) + " of '" + name + "' is already used by '" +
                                  t.name + "' (Perfetto identifies threads by tid across processes)");
  return add_track({0, process_uuid, name, {}, Kind::thread, p.pid, tid});
}

uint64_t TraceBuilder::counter(uint64_t parent_uuid, const std::string& name, const std::string& unit) {
  const Track& p = track(parent_uuid, "counter");
  if (p.kind == Kind::counter) throw std::invalid_argument("TraceBuilder::counter: the parent of '" + name + "' is a counter track");
  return add_track({0, parent_uuid, name, unit, Kind::counter, p.pid, p.tid});
}

uint32_t TraceBuilder::intern(const std::string& s) {
  auto [it, inserted] = string_index_.try_emplace(s, static_cast<uint32_t>(strings_.size()));
  if (inserted) {
    strings_.push_back(s);
    estimate_ += s.size() + 6;  // its InternedData entry, written once
  }
  return it->second;
}

std::vector<TraceBuilder::StoredArg> TraceBuilder::store(std::vector<Arg>& args, size_t& bytes) {
  std::vector<StoredArg> out;
  out.reserve(args.size());
  for (Arg& a : args) {
    bytes += 6;  // DebugAnnotation key, length, name_iid
    StoredArg sa{intern(a.name), int64_t{0}};
    if (const auto* iv = std::get_if<int64_t>(&a.value)) {
      sa.value = *iv;
      bytes += 1 + wire::Writer::varint_size(static_cast<uint64_t>(*iv));
    } else if (const auto* dv = std::get_if<double>(&a.value)) {
      sa.value = *dv;
      bytes += 9;
    } else {
      sa.value = intern(std::get<std::string>(a.value));
      bytes += 4;
    }
    out.push_back(std::move(sa));
  }
  return out;
}

bool TraceBuilder::admit(size_t bytes) {
  if (budget_ && estimate_ + bytes > budget_) {
    ++dropped_;
    return false;
  }
  estimate_ += bytes;
  return true;
}

void TraceBuilder::slice(uint64_t track_uuid, const std::string& name, int64_t begin_ns, int64_t end_ns,
                         std::vector<Arg> args, std::vector<uint64_t> flow_out, std::vector<uint64_t> flow_in) {
  if ((slices_.size() & 0xffff) == 0) poll_interrupt();  // a big run renders millions of slices
  const Track& t = track(track_uuid, "slice");
  if (t.kind == Kind::counter) throw std::invalid_argument("TraceBuilder::slice: '" + name + "' on counter track '" + t.name + "'");
  if (end_ns < begin_ns)
    throw std::invalid_argument("TraceBuilder::slice: '" + name + "' on '" + t.name + "' ends (" + std::to_string(end_ns) +
                                " ns) before it begins (" + std::to_string(begin_ns) + " ns)");
  if (budget_ && estimate_ >= budget_) {  // past the budget: drop without interning anything
    ++dropped_;
    return;
  }
  size_t bytes = 52 + 10 * (flow_out.size() + flow_in.size());  // begin + end packets, timestamps up to ~2^35 ns
  const uint32_t n = intern(name);
  std::vector<StoredArg> stored = store(args, bytes);
  if (!admit(bytes)) return;
  slices_.push_back({track_uuid, n, false, begin_ns, end_ns, std::move(stored), std::move(flow_out), std::move(flow_in)});
}

void TraceBuilder::instant(uint64_t track_uuid, const std::string& name, int64_t ts_ns, std::vector<Arg> args) {
  const Track& t = track(track_uuid, "instant");
  if (t.kind == Kind::counter) throw std::invalid_argument("TraceBuilder::instant: '" + name + "' on counter track '" + t.name + "'");
  if (budget_ && estimate_ >= budget_) {
    ++dropped_;
    return;
  }
  size_t bytes = 24;
  const uint32_t n = intern(name);
  std::vector<StoredArg> stored = store(args, bytes);
  if (!admit(bytes)) return;
  slices_.push_back({track_uuid, n, true, ts_ns, ts_ns, std::move(stored), {}, {}});
}

void TraceBuilder::counter_value(uint64_t counter_track, int64_t ts_ns, double value) {
  if ((counters_.size() & 0xffff) == 0) poll_interrupt();
  const Track& t = track(counter_track, "counter_value");
  if (t.kind != Kind::counter) throw std::invalid_argument("TraceBuilder::counter_value: track '" + t.name + "' is not a counter track");
  estimate_ += 30;
  counters_.push_back({counter_track, ts_ns, value});
}

std::string TraceBuilder::warning() const {
  if (!dropped_) return {};
  return "trace: the byte budget of " + std::to_string(budget_) + " bytes was reached: dropped " + std::to_string(dropped_) +
         " of " + std::to_string(dropped_ + slices_.size()) +
         " slices/instants (the trace ends early; raise the budget or lower trace.detail)";
}

std::string TraceBuilder::perfetto_bytes() const {
  // 1. The output order: per track, slices in nesting order (begin ascending, longer first); then
  //    all tracks merged by time. Ends come before begins at the same time on a track.
  std::vector<std::vector<size_t>> per_track(tracks_.size());
  for (size_t i = 0; i < slices_.size(); ++i) per_track[slices_[i].track - 1].push_back(i);
  std::vector<Emit> emits;
  emits.reserve(slices_.size() * 2 + counters_.size());
  for (size_t t = 0; t < per_track.size(); ++t) {
    poll_interrupt();
    auto& idx = per_track[t];
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      const Event& x = slices_[a];
      const Event& y = slices_[b];
      if (x.begin != y.begin) return x.begin < y.begin;
      if (x.instant != y.instant) return !x.instant;  // a slice encloses an instant at its start
      return x.end > y.end;
    });
    size_t seq = 0;
    std::vector<size_t> stack;
    for (const size_t i : idx) {
      const Event& e = slices_[i];
      while (!stack.empty() && slices_[stack.back()].end <= e.begin) {
        emits.push_back({slices_[stack.back()].end, t, seq++, kSliceEnd, stack.back()});
        stack.pop_back();
      }
      if (!stack.empty() && e.end > slices_[stack.back()].end) {
        const Event& p = slices_[stack.back()];
        throw std::logic_error("trace: slices on track '" + tracks_[t].name + "' do not nest: '" + strings_[e.name] + "' [" +
                               std::to_string(e.begin) + ", " + std::to_string(e.end) + "] ns overlaps '" + strings_[p.name] +
                               "' [" + std::to_string(p.begin) + ", " + std::to_string(p.end) + "] ns");
      }
      emits.push_back({e.begin, t, seq++, static_cast<uint8_t>(e.instant ? kInstant : kSliceBegin), i});
      if (!e.instant) stack.push_back(i);
    }
    while (!stack.empty()) {
      emits.push_back({slices_[stack.back()].end, t, seq++, kSliceEnd, stack.back()});
      stack.pop_back();
    }
  }
  {
    std::vector<size_t> seq(tracks_.size(), 0);
    for (size_t i = 0; i < counters_.size(); ++i) {
      const size_t t = counters_[i].track - 1;
      emits.push_back({counters_[i].ts, t, seq[t]++, kCounter, i});
    }
  }
  std::stable_sort(emits.begin(), emits.end(), [](const Emit& a, const Emit& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.track_order != b.track_order) return a.track_order < b.track_order;
    return a.seq < b.seq;
  });
  // Counter points of one track may have been given out of time order: the stable sort above
  // orders them by time (seq only breaks ties).

  // 2. Encode.
  std::string out;
  out.reserve(estimate_ + 64);
  wire::Writer packet, body, sub, interned;
  auto flush = [&]() {
    wire::Writer::put_varint(out, (static_cast<uint64_t>(f::kTracePacket) << 3) | wire::kLengthDelimited);
    wire::Writer::put_varint(out, packet.size());
    out += packet.data();
    packet.clear();
  };
  bool first = true;
  for (const Track& t : tracks_) {
    body.clear();
    body.varint(f::kTdUuid, t.uuid);
    if (t.parent) body.varint(f::kTdParent, t.parent);
    body.bytes(f::kTdName, t.name);
    sub.clear();
    switch (t.kind) {
      case Kind::process:
        sub.int64(f::kPdPid, t.pid);
        sub.bytes(f::kPdName, t.name);
        body.message(f::kTdProcess, sub);
        break;
      case Kind::thread:
        sub.int64(f::kThPid, t.pid);
        sub.int64(f::kThTid, t.tid);
        sub.bytes(f::kThName, t.name);
        body.message(f::kTdThread, sub);
        break;
      case Kind::counter:
        if (const uint64_t u = unit_enum(t.unit)) sub.varint(f::kCdUnit, u);
        body.message(f::kTdCounter, sub);
        break;
    }
    packet.varint(f::kSequenceId, kSequence);
    if (first) packet.varint(f::kSequenceFlags, kSeqIncrementalStateCleared);
    first = false;
    packet.message(f::kTrackDescriptor, body);
    flush();
  }

  Interner event_names(strings_, f::kIdEventNames), arg_names(strings_, f::kIdAnnotationNames),
      string_values(strings_, f::kIdStringValues);
  wire::Writer ann;
  for (const Emit& e : emits) {
    body.clear();
    interned.clear();
    body.varint(f::kTeType, e.type);
    if (e.type == kCounter) {
      const CounterPoint& c = counters_[e.index];
      body.varint(f::kTeTrack, c.track);
      body.dbl(f::kTeDoubleCounter, c.value);
    } else {
      const Event& s = slices_[e.index];
      body.varint(f::kTeTrack, s.track);
      if (e.type != kSliceEnd) {
        body.varint(f::kTeNameIid, event_names.get(s.name, interned));
        for (const StoredArg& a : s.args) {
          ann.clear();
          ann.varint(f::kDaNameIid, arg_names.get(a.name, interned));
          if (const auto* iv = std::get_if<int64_t>(&a.value)) ann.int64(f::kDaInt, *iv);
          else if (const auto* dv = std::get_if<double>(&a.value)) ann.dbl(f::kDaDouble, *dv);
          else ann.varint(f::kDaStringIid, string_values.get(std::get<uint32_t>(a.value), interned));
          body.message(f::kTeAnnotations, ann);
        }
        for (const uint64_t id : s.flow_out) body.fixed64(f::kTeFlowIds, id);
        for (const uint64_t id : s.flow_in) body.fixed64(f::kTeTerminatingFlowIds, id);
      }
    }
    packet.varint(f::kTimestamp, static_cast<uint64_t>(e.ts));
    packet.varint(f::kSequenceId, kSequence);
    packet.varint(f::kSequenceFlags, kSeqNeedsIncrementalState);  // events follow the tracks: never first
    packet.message(f::kTrackEvent, body);
    if (!interned.empty()) packet.message(f::kInternedData, interned);
    flush();
  }
  return out;
}

std::string TraceBuilder::chrome_json() const {
  std::string out;
  out.reserve(estimate_ * 3 + 256);
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  bool first = true;
  auto begin_event = [&]() {
    out += first ? "\n" : ",\n";
    first = false;
  };
  auto pid_tid = [&](const Track& t) {
    out += ",\"pid\":" + std::to_string(t.pid) + ",\"tid\":" + std::to_string(t.kind == Kind::thread ? t.tid : 0);
  };
  // Metadata: names and the order of processes and threads as they were created.
  for (size_t i = 0; i < tracks_.size(); ++i) {
    const Track& t = tracks_[i];
    if (t.kind == Kind::counter) continue;
    const char* what = t.kind == Kind::process ? "process" : "thread";
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "_name\"";
    pid_tid(t);
    out += ",\"args\":{\"name\":";
    append_json_string(out, t.name);
    out += "}}";
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "_sort_index\"";
    pid_tid(t);
    out += ",\"args\":{\"sort_index\":" + std::to_string(i) + "}}";
  }
  for (const Event& e : slices_) {
    const Track& t = tracks_[e.track - 1];
    begin_event();
    out += "{\"ph\":\"";
    out += e.instant ? "i\",\"s\":\"t\"" : "X\"";
    out += ",\"name\":";
    append_json_string(out, strings_[e.name]);
    pid_tid(t);
    out += ",\"ts\":";
    append_us(out, e.begin);
    if (!e.instant) {
      out += ",\"dur\":";
      append_us(out, e.end - e.begin);
    }
    if (!e.args.empty()) {
      out += ",\"args\":{";
      for (size_t k = 0; k < e.args.size(); ++k) {
        const StoredArg& a = e.args[k];
        if (k) out += ",";
        append_json_string(out, strings_[a.name]);
        out += ":";
        if (const auto* iv = std::get_if<int64_t>(&a.value)) out += std::to_string(*iv);
        else if (const auto* dv = std::get_if<double>(&a.value)) append_double(out, *dv);
        else append_json_string(out, strings_[std::get<uint32_t>(a.value)]);
      }
      out += "}";
    }
    out += "}";
    // Flows bind to the enclosing slice: the source at its start, the destination at its start.
    for (const uint64_t id : e.flow_out) {
      begin_event();
      out += "{\"ph\":\"s\",\"name\":\"flow\",\"cat\":\"flow\",\"id\":" + std::to_string(id);
      pid_tid(t);
      out += ",\"ts\":";
      append_us(out, e.begin);
      out += "}";
    }
    for (const uint64_t id : e.flow_in) {
      begin_event();
      out += "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"flow\",\"cat\":\"flow\",\"id\":" + std::to_string(id);
      pid_tid(t);
      out += ",\"ts\":";
      append_us(out, e.begin);
      out += "}";
    }
  }
  for (const CounterPoint& c : counters_) {
    const Track& t = tracks_[c.track - 1];
    begin_event();
    out += "{\"ph\":\"C\",\"name\":";
    append_json_string(out, t.name);
    out += ",\"pid\":" + std::to_string(t.pid) + ",\"ts\":";
    append_us(out, c.ts);
    out += ",\"args\":{";
    append_json_string(out, t.unit.empty() ? std::string("value") : t.unit);
    out += ":";
    append_double(out, c.value);
    out += "}}";
  }
  out += "\n]}\n";
  return out;
}

}  // namespace tessera::traces
