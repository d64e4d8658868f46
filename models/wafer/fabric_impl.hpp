#pragma once
// Private to models/wafer: the fabric's flat state (fabric.cpp: loading, calendar, routers;
// pe.cpp: PE tasks, instructions and DSD operations).
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "models/wafer/fabric.hpp"

namespace tessera::wafer {

inline constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

// Messages between the ranks of a partitioned fabric (ranks.cpp): a type byte, the run's epoch,
// then fields in host byte order (the ranks run one build of tessera).
enum : uint8_t { kMsgBound = 1, kMsgShip, kMsgStop, kMsgFail, kMsgHalt, kMsgProbe, kMsgAck, kMsgEnd, kMsgReply };
template <class T>
void put(std::vector<uint8_t>& m, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  const size_t n = m.size();
  m.resize(n + sizeof(T));
  std::memcpy(m.data() + n, &v, sizeof(T));
}
inline void put_str(std::vector<uint8_t>& m, const std::string& v) {
  put(m, static_cast<uint64_t>(v.size()));
  m.insert(m.end(), v.begin(), v.end());
}
template <class T>
void put_vec(std::vector<uint8_t>& m, const std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  put(m, static_cast<uint64_t>(v.size()));
  const size_t n = m.size();
  m.resize(n + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(m.data() + n, v.data(), v.size() * sizeof(T));
}
// Reads what put/put_str/put_vec wrote.
struct MsgReader {
  const std::vector<uint8_t>& m;
  size_t at = 0;
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    if (at + sizeof(T) > m.size()) throw std::logic_error("wafer fabric ranks: a message ends early");
    T v;
    std::memcpy(&v, m.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    if (at + n > m.size()) throw std::logic_error("wafer fabric ranks: a message ends early");
    std::string v(m.begin() + static_cast<std::ptrdiff_t>(at), m.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
    return v;
  }
  template <class T>
  std::vector<T> vec() {
    const auto n = get<uint64_t>();
    if (at + n * sizeof(T) > m.size()) throw std::logic_error("wafer fabric ranks: a message ends early");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), m.data() + at, n * sizeof(T));
    at += n * sizeof(T);
    return v;
  }
};
std::string pe_label(int64_t x, int64_t y);

struct Fabric::Impl {
  struct Failure {
    std::string msg;
  };
  // A wavelet in a router buffer or PE queue; `ready` = first cycle it may leave.
  struct Wv {
    uint32_t payload = 0;
    uint8_t color = 0;
    uint8_t control = 0;  // kData, kControl, or kAdvance: data that advances the switches it passes (fabout advance)
    int64_t ready = 0;
  };
  struct Ev {
    int64_t cycle;
    uint32_t key;  // PE slot, or router (PE index) | kRouterBit
    bool operator>(const Ev& o) const { return cycle != o.cycle ? cycle > o.cycle : key > o.key; }
  };
  static constexpr uint32_t kRouterBit = 0x80000000u;
  static constexpr uint8_t kData = 0, kControl = 1, kAdvance = 2;  // Wv::control

  // The event calendar. Entries (cycle, key) come out in the order of a binary min-heap on
  // (cycle, key) -- all of a cycle's entries by ascending key, PEs before routers -- but it is a
  // timing wheel: a two-level bitmap over the key space for the next cycle, one bucket (an
  // unordered key list) per later cycle within kWheel cycles of the current one, a binary heap for
  // later cycles. When a cycle becomes current, its entries are ordered once: a sort for a few
  // keys, through the bitmap for many. Duplicate entries of a cycle are merged (a duplicate only
  // re-runs a handler that already ran in that cycle, which returns at once) but still counted in
  // `consumed()` (FabricStats::events), as the heap would have popped them. Keys pushed for the
  // current cycle while it is being handled go to a small heap merged into the order.
  class Calendar {
   public:
    static constexpr int64_t kWheel = 1024;  // power of two
    void init(uint32_t pe_slots, uint32_t routers);
    void clear(int64_t c0);  // empty, with c0 the earliest cycle that may be pushed
    bool empty() const { return now_i_ == now_.size() && late_.empty() && wheel_count_ == 0 && far_.empty() && bentries_ == 0; }
    // Earliest entry (the calendar must not be empty). Makes its cycle current.
    Ev top() {
      if (now_i_ == now_.size() && late_.empty()) advance();
      return {cur_, late_.empty() || (now_i_ < now_.size() && now_[now_i_] < late_.front()) ? now_[now_i_] : late_.front()};
    }
    void pop() {  // after top()
      consumed_ += 1 + dups_;
      dups_ = 0;
      if (!late_.empty() && (now_i_ == now_.size() || !(now_[now_i_] < late_.front()))) {
        std::pop_heap(late_.begin(), late_.end(), std::greater<>());
        late_.pop_back();
      } else {
        ++now_i_;
      }
    }
    void push(int64_t c, uint32_t key) {
      const uint64_t d = static_cast<uint64_t>(c - cur_);
      if (d == 1 && loaded_) [[likely]] {  // the next cycle: straight into the ordering bitmap
        set_bit(key);
      } else if (d < static_cast<uint64_t>(kWheel) && (d != 0 || !loaded_)) {
        const size_t b = static_cast<size_t>(c & (kWheel - 1));
        std::vector<uint32_t>& v = wheel_[b];
        if (v.empty()) nonempty_[b >> 6] |= uint64_t{1} << (b & 63);
        v.push_back(key);
        ++wheel_count_;
      } else {
        push_slow(c, key);
      }
    }
    // The next key of the current cycle (after top()); false once the cycle is exhausted.
    bool next_key(uint32_t& key) {
      if (late_.empty()) {
        if (now_i_ == now_.size()) return false;
        key = now_[now_i_++];
      } else {
        key = top().key;
        pop();
        return true;
      }
      consumed_ += 1 + dups_;
      dups_ = 0;
      return true;
    }
    uint64_t consumed() const { return consumed_; }
    // The key next_key would give, without taking it (false: the current cycle is exhausted).
    bool peek_key(uint32_t& key) const {
      if (late_.empty()) {
        if (now_i_ == now_.size()) return false;
        key = now_[now_i_];
      } else {
        key = now_i_ < now_.size() && now_[now_i_] < late_.front() ? now_[now_i_] : late_.front();
      }
      return true;
    }
    // The cycle top() would make current, without making it so (INT64_MAX: empty). The striped
    // run (stripes.cpp) peeks, waits until its neighbours cannot send it anything earlier, then
    // takes the cycle.
    int64_t peek() const;

   private:
    void set_bit(uint32_t key) {
      const size_t i = key & kRouterBit ? pe_slots_ + (key & ~kRouterBit) : key;
      uint64_t& wd = bits_[i >> 6];
      if (!wd) summary_[i >> 12] |= uint64_t{1} << ((i >> 6) & 63);
      wd |= uint64_t{1} << (i & 63);
      ++bentries_;
    }
    void advance();  // makes the next cycle with entries current (fabric.cpp)
    void push_slow(int64_t c, uint32_t key);  // the current cycle while it is handled, or beyond the wheel
    std::vector<std::vector<uint32_t>> wheel_;
    std::vector<uint64_t> nonempty_;     // bucket bitmap
    std::vector<Ev> far_;                // min-heap (std::greater)
    size_t wheel_count_ = 0;
    int64_t cur_ = 0;                    // the current cycle; the wheel holds [cur_, cur_ + kWheel)
    bool loaded_ = false;                // cur_'s entries are in now_ / late_
    std::vector<uint32_t> now_;          // the current cycle's keys, ascending, merged
    size_t now_i_ = 0;
    uint64_t dups_ = 0;                  // merged duplicates of the current cycle, counted at the next pop
    std::vector<uint32_t> late_;         // min-heap of keys pushed for the current cycle
    uint64_t consumed_ = 0;
    // Ordering many keys: a bitmap over dense key indices (PE slots, then routers) and a summary.
    // Between cycles it holds the entries pushed for cur_ + 1 (bentries_ of them, duplicates included).
    uint32_t pe_slots_ = 0;
    std::vector<uint64_t> bits_, summary_;
    uint64_t bentries_ = 0;
  };
  // A DSD operation in progress on the main thread or a microthread.
  struct OpRun {  // (56 bytes: no padding)
    int32_t instr = -1;
    int32_t width = 1;
    int64_t i = 0, len = 0;
    int64_t next = 0, start = 0;
    int64_t drained_at = 0;           // drain: the cycle the last element taken ahead counts at
    int16_t interval = 1, pause = 0;  // cycles per element group (simd.fmacs_interval); idle cycles left of this group
    uint16_t inq = 0;                 // input queues its fabin operands read (bit per queue; fixed at issue)
    bool conflict_paid = false;       // pe.bank_conflicts: the extra cycle of this element group is spent
    uint8_t bpe = 0;                  // pe.sram_bytes_per_cycle: memory bytes per element when the limit binds (sram_limited_bytes), else 0
  };
  struct Mt {
    OpRun op;
    int16_t on_activate = -1, on_unblock = -1;
    uint8_t id = 0;
    bool fifo = false;  // it has a fifo operand (it may wait for the main thread's fifo pushes and pops)
    // drain's plan, fixed at issue: a move from a fabin DSD into a memory DSD (kMvMove; kMvSrc16: a
    // 16-bit source, its payload's low half; kMvOp16: a 16-bit move) and that destination DSD, kept
    // equal to the PE's by dsd_off / dsd_len. drain reads it here instead of the PE's DSD copy (a
    // cache miss per wavelet on large layouts).
    uint8_t mv = 0;
    int16_t dk = -1;  // the destination's DSD index
    Dsd dst{};
  };
  static constexpr uint8_t kMvMove = 1, kMvSrc16 = 2, kMvOp16 = 4;
  // A PE's running microthreads in issue order, like a vector: the first one inside the PE
  // (drain and every step of a PE with a running move read it; on the heap it was a dependent
  // cache miss more per wavelet on large layouts), two or more on the heap (rare: a stream's move
  // beside another fabric op) until they are down to one again.
  class alignas(64) MtList {
   public:
    bool empty() const { return n_ == 0; }
    size_t size() const { return n_; }
    Mt* begin() { return spill_ ? spill_->data() : &in_; }
    Mt* end() { return begin() + n_; }
    const Mt* begin() const { return spill_ ? spill_->data() : &in_; }
    const Mt* end() const { return begin() + n_; }
    Mt& operator[](size_t k) { return begin()[k]; }
    void push_back(const Mt& m) {
      if (!spill_ && n_ == 0) {
        in_ = m;
      } else {
        if (!spill_) spill_ = std::make_unique<std::vector<Mt>>(1, in_);
        spill_->push_back(m);
      }
      ++n_;
    }
    void erase(Mt* it) {  // (it in [begin, end))
      std::copy(it + 1, end(), it);
      --n_;
      if (spill_) {
        spill_->pop_back();
        if (n_ <= 1) {
          if (n_) in_ = spill_->front();
          spill_.reset();
        }
      }
    }
    void clear() {
      n_ = 0;
      spill_.reset();
    }

   private:
    uint32_t n_ = 0;
    std::unique_ptr<std::vector<Mt>> spill_;  // while two or more run: all of them
    Mt in_{};
  };
  static_assert(sizeof(MtList) == 128, "a PE's first microthread in two cache lines");
  struct ProgInfo {
    std::array<int8_t, kMaxColors> color_q{};    // input queue a color is delivered to (-1: none)
    std::array<int8_t, kMaxColors> data_task{};  // task index fired by a color (-1: none)
    uint64_t init_active = 0, init_blocked = 0;  // by task index
    uint64_t logged = 0;                         // tasks in FabricOptions::task_logs, by index
    std::vector<int8_t> by_id;                   // task indices by hardware id (priority)
    std::array<int8_t, 64> ctrl_task{};          // control task index by hardware id (-1: none)
    bool has_ctrl = false;
    uint8_t used_q = 0;                          // input queues bound to a color
    uint8_t data_q = 0;                          // input queues a data task takes its wavelets from
    std::vector<int32_t> width;                  // per instruction: a DSD op's SIMD width (instr_width: the program's DSDs and the config)
  };
  // A control wavelet that names a control task of the PE's program (its index half = task id):
  // it fires that task and is neither data for a data task nor for a fabin DSD.
  static bool for_ctrl_task(const ProgInfo& pi, const Wv& w) {
    return w.control == kControl && pi.has_ctrl && (w.payload >> 16) < 64 && pi.ctrl_task[w.payload >> 16] >= 0;
  }
  // A PE's state in 64-byte lines by use (large layouts are bound by the cache misses of their
  // PEs' state): line 0 what every PE event reads (pe_step, pick_task, the router's output queues),
  // line 1 the DSD copies and SRAM page table (drain, store), lines 2-3 the first running
  // microthread (MtList), line 4 the main thread's op, line 5 queue heads and the colder rest, then
  // registers.
  struct alignas(64) Pe {
    uint32_t prog = 0;
    int32_t task = -1, pc = 0;
    bool halted = false;
    bool mt_wait = false;          // main thread waits for a busy microthread
    bool rec = false;              // FabricOptions::record for this PE (record_only)
    int64_t ready_at = 0;
    uint64_t active = 0, blocked = 0;
    std::array<uint8_t, 16> qcount{};  // input queues 0-7, output queues 8-15
    int32_t rect = 0;              // the layout rectangle it belongs to (FabricSummary groups)
    uint32_t wv = 0;
    std::vector<Dsd> dsds;         // per-PE copies once dsd_off/dsd_len changed one (else the program's)
    std::unique_ptr<uint32_t[]> pages;  // SRAM page table, data area / kPage entries (lazily; kNone = never written)
    // The last page accessed and its base in `sram` (store, load_elem): a one-entry cache beside the
    // table's pointer, so a run of accesses to one page -- a weight stream's one-element junk array,
    // a block filled in order -- does not miss on the table (kNone: none yet).
    mutable uint32_t pg_last = kNone, pg_base = 0;
    MtList mts;                    // running microthreads (usually none; lines 2 and 3)
    OpRun main;
    int64_t task_start = 0;
    std::array<uint8_t, 16> qhead{}, qhw{};
    int32_t x = 0, y = 0, px = 0, py = 0;
    int64_t busy = 0;
    alignas(64) std::array<uint32_t, kRegs> regs{};
    std::vector<uint32_t> fifo;    // per DSD: head, count (lazily)
    int64_t halt_cycle = -1;
  };

  // One thread's share of a run (FabricOptions::threads, stripes.cpp): a stripe of PE rows, its
  // calendar, counters and SRAM page allocation. A sequential run has one worker owning every row,
  // whose counters are the fabric's own. A handler is passed the worker that runs it; a wake of a
  // router another worker owns becomes a message to that worker (`post`).
  struct Msg {
    int64_t cycle;
    uint32_t router;
    uint32_t occ_slot;  // a slot of that router that just received its first wavelet (kNone: none); kInstall | lane: a port reply's stream
  };
  struct Inbox {
    std::mutex mu;
    std::vector<Msg> box;
    std::atomic<uint32_t> n{0};  // box.size(), read without the lock
    bool done = false;           // its worker has left the run: messages no longer count as work
  };
  struct alignas(64) Worker {
    int id = 0;
    Calendar cal;
    FabricStats* st = nullptr;        // the fabric's own (worker 0) or own_st, merged after the run
    FabricSummary* sum = nullptr;
    std::map<uint64_t, std::vector<int64_t>>* log = nullptr;
    FabricStats own_st;
    FabricSummary own_sum;
    std::map<uint64_t, std::vector<int64_t>> own_log;
    // FabricOptions::record: the fabric's lists (one worker), or its own, each record tagged with
    // the event (cycle, key) that made it, merged into the sequential order after the run.
    std::vector<DeliveryRecord>* deliveries = nullptr;
    std::vector<OpRecord>* ops = nullptr;
    std::vector<TaskRecord>* tasks = nullptr;
    std::vector<DeliveryRecord> own_deliveries;
    std::vector<OpRecord> own_ops;
    std::vector<TaskRecord> own_tasks;
    bool tagged = false;
    std::vector<std::pair<int64_t, uint32_t>> tag_d, tag_o, tag_t;
    int64_t last_progress = 0;
    int64_t hops_binned = 0;
    uint32_t r_lo = 0, r_n = 0;       // the routers (PE index y * W + x) of its rows
    uint32_t first_end = 0;           // past its first row's routers
    uint32_t last_begin = 0;          // its last row's first router
    uint32_t page_next = 0, page_end = 0;  // SRAM pages: the rest of its current slab
    int64_t done_through = -1;        // the last cycle it finished (a message for it would be a protocol slip)
    int64_t cur_cycle = -1;           // the cycle it is in (or was last in)
    size_t next_flip = 0;             // the first SRAM fault (Impl::flips, by cycle) due after its current cycle
    std::vector<Msg> out_prev, out_next;   // posted this cycle, not yet flushed
    std::vector<Msg> scratch;
    bool live = false;                     // counted in Impl::live (has events)
    double t_wait_above = 0, t_wait_below = 0;  // seconds waited in cycles (TESSERA_STRIPE_STATS)
    Inbox in_prev, in_next;                // from the worker above, from the one below
    Inbox in_any;                          // from any worker (a port reply's streams: Msg::occ_slot = kInstall | lane)
    int64_t events_remote = -1;            // a partitioned run: the events another rank's worker handled (else its calendar counts)
    bool idle_now = false;                 // a partitioned run: waiting with no event of its own (termination waves)
    int64_t reply_t = -1;                  // the last event (cycle, key) of its wavelets a port reply counts
    uint32_t reply_key = 0;
    Worker* prev = nullptr;
    Worker* next = nullptr;
    // What the neighbours read: no event of this worker at a cycle below lb_all is still to come,
    // nor one of its first row's routers below lb_first; its last progress and hops.
    alignas(64) std::atomic<int64_t> lb_all{0};
    std::atomic<int64_t> lb_first{0};
    std::atomic<int64_t> lp_pub{0};
    std::atomic<int64_t> hops_pub{0};
    std::atomic<bool> sleeping{false};     // blocked on `bell` (after spinning a while)
    alignas(64) std::atomic<uint32_t> bell{0};  // rung (and notified) when a bound it may wait for moves
    bool owns(uint32_t r) const { return r - r_lo < r_n; }
  };
  std::vector<std::unique_ptr<Worker>> workers;  // [0] always exists
  Worker& w0() { return *workers[0]; }

  explicit Impl(Fabric& fab);
  Fabric& f;
  const WaferConfig& cfg;
  const LoadedLayout* L = nullptr;
  int64_t W = 0, H = 0, hop = 1, start = 0;
  int64_t ramp = 1;  // router.ramp_latency: a wavelet from the PE reaches the crossbar ramp - 1 cycles after its queue, one to the PE arrives ramp cycles after the router sends it
  int D = 1, QD = 1;
  std::array<int, 8> in_depth{}, out_depth{};

  // Routers: route slots (PE, color), CSR by PE.
  // A slot's state in one 64-byte line (a hop reads most of it: large layouts are bound by the cache
  // misses of their routers' state, one per array before): its buffers' counts and heads, their
  // rings in `bufs`, the downstream slots, the router, the route and its position.
  struct alignas(64) Slot {
    std::array<uint8_t, 4> cnt{};   // wavelets in the buffer of each rx direction (N/S/E/W)
    std::array<uint8_t, 4> head{};  // their heads
    std::array<uint32_t, 4> ring{}; // per rx direction: first index of its buffer in bufs
    std::array<uint32_t, 4> down{kNone, kNone, kNone, kNone};  // per tx direction: the slot receiving there (kNone: off the fabric)
    uint32_t pe = 0;                // its router
    Route route{};
    uint8_t pos = 0;                // the route's switch position
    uint8_t rx = 0;                 // rx over all switch positions, N/S/E/W bits
    uint8_t color = 0;
  };
  static_assert(sizeof(Slot) == 64, "a slot's state is one cache line");
  std::vector<Slot> slots;
  std::vector<uint32_t> slot_begin, slot_buf;
  std::vector<uint8_t> slot_color;  // (also Slot::color: find_slot reads a router's slots' colors here, in one line)
  // A buffer by index slot * 4 + direction: its count, head and ring start.
  uint8_t& bcnt(size_t bi) { return slots[bi >> 2].cnt[bi & 3]; }
  uint8_t bcnt(size_t bi) const { return slots[bi >> 2].cnt[bi & 3]; }
  uint8_t& bhd(size_t bi) { return slots[bi >> 2].head[bi & 3]; }
  uint8_t bhd(size_t bi) const { return slots[bi >> 2].head[bi & 3]; }
  uint32_t bring(size_t bi) const { return slots[bi >> 2].ring[bi & 3]; }
  uint32_t sdown(size_t bi) const { return slots[bi >> 2].down[bi & 3]; }
  // Router::occ: bit j set while slot first + j has a wavelet in one of its buffers (a router has at
  // most one slot per color, kMaxColors = 32); router_step looks only at those.
  void occupied(uint32_t slot) {
    Router& R = routers[slots[slot].pe];
    R.occ |= 1u << (slot - R.first);
  }
  // A per-PE record (FabricOptions::record) made in the event (t, key).
  template <class R>
  static void record(Worker& w, std::vector<R>& v, std::vector<std::pair<int64_t, uint32_t>>& tags, int64_t t, uint32_t key, const R& r) {
    v.push_back(r);
    if (w.tagged) tags.emplace_back(t, key);
  }
  // A wavelet went into slot ds's buffer (was_empty: its first), readable at c: the slot's router
  // is woken then; a router of another worker's stripe through a message.
  void pushed_down(Worker& w, uint32_t ds, bool was_empty, int64_t c) { pushed_down(w, ds, slots[ds].pe, was_empty, c); }
  void pushed_down(Worker& w, uint32_t ds, uint32_t r, bool was_empty, int64_t c) {  // r = slots[ds].pe
    if (w.owns(r)) {
      if (was_empty) occupied(ds);
      wake_router(w, r, c);
    } else {
      post(w, {c, r, was_empty ? ds : kNone});
    }
  }
  void post(Worker& w, const Msg& m) { (m.router < w.r_lo ? w.out_prev : w.out_next).push_back(m); }
  static constexpr uint32_t kInstall = 0x40000000u;  // Msg::occ_slot: install lane (occ_slot & 0xffff) of the reply's port
  std::atomic<int64_t> reply_count{0};  // wavelets the reply has seen this run, all workers
  void maybe_empty(uint32_t slot) {  // after a pop from one of its buffers
    // The counts byte by byte, over the slot's rx directions: one 4-byte load of them right after
    // the pop's 1-byte store cannot be forwarded from the store buffer and waits for every earlier
    // store to reach the cache (downstream buffers that miss): 21% of router_step on BERT-base.
    const Slot& S = slots[slot];
    for (unsigned m = S.rx; m; m &= m - 1)
      if (S.cnt[static_cast<size_t>(std::countr_zero(m))]) return;
    Router& R = routers[S.pe];
    R.occ &= ~(1u << (slot - R.first));
  }
  std::array<int64_t, 4> nb_delta{}; // PE index step to the neighbour in direction N/S/E/W
  // Per router: a plain relay -- no PE, one routed color, one switch position taking one of N/S/E/W
  // and sending to one of N/S/E/W -- is handled by relay_step, a fast path of router_step with the
  // same effects (bi == kNone: not a plain relay).
  struct Relay {
    uint32_t bi = kNone;   // its input buffer: slot * 4 + rx direction
    uint32_t dbi = kNone;  // the receiving buffer downstream: slot * 4 + direction (kNone: off the fabric)
    uint32_t dr = 0;       // the downstream router
    uint8_t tx = 0;        // the tx direction
  };
  // A router's state in one 64-byte line (an event at a router reads most of it; a miss each in
  // separate arrays before).
  struct alignas(64) Router {
    int64_t wake_last = -1, wake_push = -1;  // the last cycle handled and the last pushed
    Relay relay;                             // the plain-relay fast path (relay.bi == kNone: none)
    uint32_t occ = 0;                        // slots holding wavelets, bit j: slot first + j
    uint32_t first = 0;                      // its first slot (slot_begin[r])
    std::array<uint8_t, kDirs> turns{};      // per tx direction: the input id whose turn it is (router_step)
    uint8_t has_port = 0;                    // an edge port's lane ends here (inject; no relay fast path)
  };
  static_assert(sizeof(Router) == 64, "a router's state is one cache line");
  std::vector<Router> routers;
  // Faults (Fabric::add_fault); `idx` is the fault's place in Fabric::fired_.
  struct Flip {
    Fabric::SramFlip f;
    uint32_t slot = 0;
    size_t idx = 0;
  };
  struct Drop {
    Fabric::WaveletDrop f;
    uint32_t router = 0;
    size_t idx = 0;
  };
  std::vector<Flip> flips;                 // sorted by cycle (stable) at each start
  std::vector<Drop> drops;
  std::vector<uint8_t> has_drop;           // per router while drops exist (else empty)
  std::vector<std::pair<uint32_t, Relay>> relay_saved;  // relays disabled for drops, restored at reset
  size_t faults = 0;
  void apply_flips(Worker& w, int64_t cycle);  // every flip of w's PEs due at or before `cycle` (w.next_flip: past every flip due by then)
  // The index into drops of a rule taking this wavelet, -1: none (inline: no drops, the common case).
  int drop_at(uint32_t r, int d, int color, int64_t t) { return has_drop.empty() ? -1 : drop_rule(r, d, color, t); }
  int drop_rule(uint32_t r, int d, int color, int64_t t);
  std::vector<Wv> bufs;
  std::vector<int64_t> link;
  // Edge ports: lanes by port; per router whether one ends there (those skip the relay fast path).
  struct PortLane {
    uint32_t router = 0, slot = kNone;
    uint8_t dir = 0, color = 0;
    std::vector<uint32_t> in;                       // input: the stream
    std::vector<int64_t> ready;                     // input: per wavelet, first cycle at the port (relative; empty: 0)
    size_t next = 0;                                // input: next to inject
    int64_t last = -1;                              // input: cycle of the last injection
    std::vector<std::pair<uint32_t, int64_t>> out;  // output: (payload, relative cycle)
    uint32_t port = 0;                              // index in Layout::ports
    std::vector<uint32_t> staged;                   // a reply's stream on several threads, until its router's worker installs it
    int64_t staged_at = 0;
  };
  struct PortRt {
    const PortSpec* spec = nullptr;
    std::vector<PortLane> lanes;
  };
  std::vector<PortRt> ports;
  // Input lanes by router (router, port, lane), sorted: inject looks up its router's.
  std::vector<std::array<uint32_t, 3>> in_lanes;
  void inject(Worker& w, uint32_t r, int64_t t);
  PortLane* out_lane(uint32_t r, int dir, int color);
  // Fabric::set_port_reply: the armed reply, its ports (indices); the wavelets seen this run are
  // `reply_count` (below).
  Fabric::PortReply reply;
  std::vector<uint8_t> reply_from;  // per port
  uint32_t reply_to = 0;
  // A wavelet of the reply's from-ports left at cycle t in router r's event: true when it is the
  // last; then `fire` is the cycle the sequential loop fires the reply at (the latest such event).
  bool reply_counted(Worker& w, int64_t t, uint32_t r, const PortLane& ln, int64_t& fire);
  void fire_reply(Worker* w, int64_t t);  // (w null: a rank without a stripe, after its run)
  // PEs.
  std::vector<uint32_t> pe_slot;
  std::vector<Pe> pes;
  std::vector<ProgInfo> pinfo;
  std::vector<Wv> qbuf;
  // SRAM: pages of FabricStats::kPageBytes in slabs of kSlabPages that never move (a page's index:
  // slab << kSlabShift | page); each worker takes whole slabs (slab_count) and pages from them.
  static constexpr uint32_t kSlabShift = 8, kSlabPages = 1u << kSlabShift;
  std::vector<std::unique_ptr<uint8_t[]>> slabs;
  std::atomic<uint32_t> slab_count{0};
  std::atomic<int64_t> sram_pages{0};  // allocated, all workers (the budget's count)
  uint8_t* page_ptr(uint32_t page) const { return slabs[page >> kSlabShift].get() + static_cast<size_t>(page & (kSlabPages - 1)) * FabricStats::kPageBytes; }
  uint32_t new_page(Worker& w, uint32_t s);
  // Wakes (per PE slot, per router): the last cycle handled and the last pushed.
  std::vector<int64_t> pwake_last, pwake_push;  // (a router's: Router::wake_last, wake_push)

  // FabricOptions::summary: per program, the FabricSummary::phases index of each of its tasks
  // (phase_of[phase_base[prog] + task]).
  std::vector<uint32_t> phase_base;
  std::vector<int32_t> phase_of;
  // Groups: rectangles, then ports (FabricSummary). A delivery into a PE also counts in `delivered`.
  void summary_sent(Worker& w, int32_t group, int color, int64_t t) { w.sum->sent[static_cast<size_t>(group) * kMaxColors + static_cast<size_t>(color)].add(t - start, t - start); }
  void summary_received(Worker& w, int32_t group, int color, int64_t t) {
    w.sum->received[static_cast<size_t>(group) * kMaxColors + static_cast<size_t>(color)].add(t - start, t - start);
    if (group < w.sum->rects) w.sum->delivered.add(t - start, 1);
  }
  std::vector<int64_t> task_end;             // FabricOptions::task_ends: per PE slot x 64 tasks (relative cycle, -1)
  std::map<uint64_t, std::vector<int64_t>> task_log;  // FabricOptions::task_logs: slot x 64 + task -> every end (worker 0's; the others' merged in)
  void load(const LoadedLayout& layout);
  static int64_t estimate_bytes(const LoadedLayout& layout, const WaferConfig& cfg, int64_t& fill_bytes);  // fill_bytes: the SRAM part
  void check_host_memory(const LoadedLayout& layout);  // throws InputError past FabricOptions::host_memory_budget
  int64_t sram_budget = -1;                              // bytes SRAM pages may take (-1: no budget)
  void reset(int64_t c0);
  // Workers for a run on `threads` threads (stripes.cpp): stripes of rows balanced by route slots
  // and program PEs; 1 when a port reply could come too soon for them (SwarmX latency) or
  // the layout has too few rows. Returns the count made.
  int plan_workers(int threads);
  Worker& worker_of_row(int64_t y);
  // The striped run (stripes.cpp): every worker's loop; fills the stop reason, if any, and the
  // cycle the run ends at. Workers' counters are merged into the fabric's.
  struct StripedEnd {
    std::optional<std::string> stop;
    int64_t stop_cycle = INT64_MAX;
    bool deadlock = false;
    int64_t next_cycle = INT64_MAX;  // the earliest event left over all workers
  };
  StripedEnd run_striped(int64_t c0);
  void worker_loop(Worker& w, int64_t c0, StripedEnd& end, std::mutex& end_mu);
  void merge_workers();
  int64_t last_progress() const;  // over all workers
  bool apply_inbox(Worker& w);     // the messages for w: its routers woken (true: there were some)
  void flush(std::vector<Msg>& out, Inbox& to);
  void send_any(Worker& to, const Msg& m);  // into to.in_any, and ring it
  void retire(Worker& w);          // w leaves the run (done, stopped or failed)
  std::atomic<int64_t> live{0};    // workers with events + messages in flight (0: the run is over)
  void live_sub(int64_t k) {
    if (live.fetch_sub(k) == k) ring_all();  // the run is over: wake everyone to leave
  }
  static void ring(Worker& x) {  // after a bound x may wait for moved (seq_cst on both sides)
    if (x.sleeping.load()) {
      x.bell.fetch_add(1);
      x.bell.notify_all();
    }
  }
  void ring_all() {
    for (auto& x : workers) {
      x->bell.fetch_add(1);
      x->bell.notify_all();
    }
  }
  std::optional<std::string> failure;  // the first Failure in the sequential order, thrown again after the threads join
  std::atomic<int64_t> fail_cycle{INT64_MAX};  // its cycle and key (the key under the run's mutex)
  uint32_t fail_key = 0;
  std::atomic<bool> halt_all{false};   // the run was interrupted (Ctrl-C): every worker ends
  std::atomic<int64_t> stop_at{INT64_MAX};  // a deadlock decided at this cycle: no worker goes past it
  // Stops and failures of a striped or partitioned run (worker_loop, and messages from other ranks):
  // the earliest in the sequential order wins.
  StripedEnd* run_end = nullptr;
  std::mutex* run_end_mu = nullptr;
  void begin_run(StripedEnd& out, std::mutex& mu);  // a striped or partitioned run's shared state, reset
  void take_leftovers(Worker& w, StripedEnd& out);   // after the loop: its earliest event not handled (into out.next_cycle); inboxes emptied
  void note_stop(int64_t c, bool deadlock, std::string why);
  void note_fail(int64_t c, uint32_t key, std::string msg);

  // A partitioned fabric (FabricOptions::comm with more than one rank; ranks.cpp). Worker k runs on
  // rank k; on every other rank it is a proxy whose bounds (lb_all, lb_first, lp_pub, hops_pub)
  // arrive as messages. What crosses a boundary besides wakes -- the receiving buffers of the two
  // boundary rows that face each other, which both sides change in the strict alternation of the
  // ordering protocol (stripes.cpp) -- travels with the wakes: after its first row a worker sends
  // the worker above the buffers of the routers it handled there (theirs and its own facing ones),
  // after its last row the worker below likewise. Only the rank that owns a PE holds its SRAM.
  RankComm* comm = nullptr;  // null: one process
  int me = 0;
  std::vector<int64_t> rank_cut;       // first row of each rank's stripe (plan_ranks, at load)
  int64_t own_y0 = 0, own_y1 = INT64_MAX;  // this rank's rows
  bool own_row(int64_t y) const { return y >= own_y0 && y < own_y1; }
  int rank_of_row(int64_t y) const;
  std::vector<int64_t> cut_rows(int n) const;  // stripes' first rows for n workers, balanced by work per row
  void plan_ranks();
  uint32_t epoch = 0;                  // partitioned runs so far: every message carries it
  std::vector<uint32_t> touched_first, touched_last;  // boundary-row routers handled this cycle
  std::vector<int64_t> sent_to, recv_from;             // messages per rank this run
  int64_t work_sent = 0, work_recv = 0;                // of them, those with wakes (termination)
  bool ended = false;                                  // every worker idle, nothing in flight
  int64_t wave = 0;                                    // rank 0's termination waves (Mattern's double count)
  int wave_acks = 0;
  bool wave_open = false, wave_prev_ok = false;
  std::vector<int64_t> wave_now, wave_prev;
  bool work_all = false;                               // after a partitioned run: work_remains() over every rank
  int64_t sram_pages_all = 0;
  void send_msg(int to, std::vector<uint8_t> m);
  void tell_workers(const std::vector<uint8_t>& m);    // every other rank with a worker
  void pump(Worker& w);                                // take what arrived
  void send_bound(Worker& w);
  void ship(Worker& w, bool up);                       // wakes and facing buffers for the worker above (up) or below
  bool term_check(Worker& w, bool idle);               // an idle worker: true once the run is over everywhere
  bool gone = false;                                   // this rank's worker left its loop (it lingers: linger())
  static bool inbox_empty(const Worker& w) { return !w.in_prev.n.load() && !w.in_next.n.load(); }
  void linger(Worker& w);                              // after the loop: take messages, idle, until every rank is done
  StripedEnd run_parts(int64_t c0);
  void gather_parts(StripedEnd& se);                   // after the loops: results and per-PE state to every rank
  bool work_remains_owned() const;
  void report_parts(std::vector<StuckPe>& pes_out, std::vector<StuckRouter>& routers_out) const;
  // A port reply on ranks. Every rank sees every wavelet the reply counts: a worker sends what its
  // routers counted (Reply: its count so far, its latest event, the wavelets) to every rank before
  // each bound it publishes and after each cycle, and every rank fires the reply itself -- the same
  // call with the same data, so that each rank's driver stays the same -- once the count is
  // complete; the lanes' owners wake their routers. For the streams to arrive in time, a worker
  // keeps within reply_lead cycles of the slowest worker while the reply is armed (reply_gate):
  // the streams are due at least that long after the last counted wavelet.
  struct ReplyWv {
    uint32_t port, lane, payload, pad;
    int64_t cycle;  // relative, as PortLane::out
  };
  std::vector<ReplyWv> reply_pending;             // counted here, not yet sent
  std::vector<int64_t> reply_n, reply_t_of;       // per rank: wavelets counted, the latest event's cycle and key
  std::vector<uint32_t> reply_key_of;
  bool reply_fired = false;                       // this run
  int64_t reply_lead = 0;
  void flush_reply(Worker& w);
  void take_reply(int from, MsgReader& rd, Worker* w);
  bool reply_complete(int64_t& fire) const;       // every rank's count in: the cycle the sequential loop fires at
  bool reply_now(int64_t& fire);                  // complete and not yet fired this run (then marked fired)
  int64_t reply_gate(const Worker& w) const;      // the last cycle w may enter (INT64_MAX / 4: any)

  void handle(Worker& w, int64_t cycle, uint32_t key);
  bool work_remains() const;
  void finish_stats(int64_t end);
  // Why a run stopped: PEs of rows [y0, y1), input ports, router buffers of rows [y0, y1).
  void report(std::vector<StuckPe>& pes_out, std::vector<StuckRouter>& routers_out, int64_t y0 = 0, int64_t y1 = INT64_MAX, bool ports = true) const;

  uint32_t slot_of(int64_t x, int64_t y) const {
    return x < 0 || y < 0 || x >= W || y >= H ? kNone : pe_slot[static_cast<size_t>(y * W + x)];
  }
  const Program& prog(uint32_t s) const { return L->programs[pes[s].prog]; }
  uint32_t find_slot(uint32_t pe, int color) const;
  void wake_router(Worker& w, uint32_t r, int64_t c) {
    if (!w.owns(r)) {
      post(w, {c, r, kNone});
      return;
    }
    if (routers[r].wake_push == c) return;
    routers[r].wake_push = c;
    w.cal.push(c, r | kRouterBit);
  }
  void wake_pe(Worker& w, uint32_t s, int64_t c) {  // (a PE is only ever woken by its own stripe)
    if (pwake_push[s] == c) return;
    pwake_push[s] = c;
    w.cal.push(c, s);
  }
  void router_step(Worker& w, uint32_t r, int64_t t);
  // Its parts (fabric.cpp, inline there: router_step is their only caller): the room check, the
  // send to every tx direction, a control wavelet's switch, a buffer's pop, and the path of a
  // router with one input.
  inline bool has_room(const Router& R, uint32_t r, uint32_t ps, uint32_t s, unsigned tx, int64_t t);
  inline void forward(Worker& w, uint32_t r, uint32_t ps, uint32_t s, const Wv& wv, unsigned tx, int64_t up, int64_t t);
  inline bool switch_on(uint32_t s);
  inline bool pop_buffer(Worker& w, uint32_t r, uint32_t s, int d, int64_t t);
  inline void step_one(Worker& w, Router& R, uint32_t r, uint32_t ps, uint32_t s, int d, int64_t t);
  // FabricOptions::summary: the hops of the cycle just handled go to FabricSummary::hops (the run
  // loop calls it after each cycle; the hot paths only count wavelet_hops).
  void bin_hops(Worker& w, int64_t t) {
    const int64_t n = w.st->wavelet_hops - w.hops_binned;
    if (!n) return;
    w.hops_binned = w.st->wavelet_hops;
    w.sum->hops.add(t - start, n);
  }
  void relay_step(Worker& w, const Relay& rl, uint32_t r, int64_t t);
  Wv& qentry(uint32_t s, int q, int k) { return qbuf[(static_cast<size_t>(s) * 16 + static_cast<size_t>(q)) * static_cast<size_t>(QD) + static_cast<size_t>(k)]; }
  const Wv& qentry(uint32_t s, int q, int k) const { return qbuf[(static_cast<size_t>(s) * 16 + static_cast<size_t>(q)) * static_cast<size_t>(QD) + static_cast<size_t>(k)]; }
  void push_queue(uint32_t s, int q, const Wv& w);
  void pop_queue(uint32_t s, int q);
  [[noreturn]] void sram_outside(uint32_t s, uint32_t addr, bool write) const;  // (store, load_elem)
  uint32_t pe_index(uint32_t s) const { return static_cast<uint32_t>(pes[s].y * W + pes[s].x); }

  // SRAM (pe.cpp).
  void store(Worker& w, uint32_t s, uint32_t addr, int bytes, uint32_t bits);
  uint32_t load_elem(uint32_t s, uint32_t addr, int bytes) const;
  static uint32_t encode(float v, Elem e);
  static float decode(uint32_t bits, Elem e);

  // PE execution (pe.cpp).
  // A wavelet the router hands to PE s's empty input queue q, readable at t1, that a running async
  // move from that queue into memory would take at t1 anyway: taken now (stored, counted; the PE
  // woken only when the op ends), as a weight load's blocks stream past. false: queue it.
  bool drain(Worker& w, uint32_t s, int q, const Wv& wv, int64_t t1);
  void pe_step(Worker& w, uint32_t s, int64_t t);
  bool pick_task(Worker& w, uint32_t s, int64_t t);
  bool may_pick(uint32_t s) const;
  void exec(Worker& w, uint32_t s, int64_t t);
  // Runs up to `width` elements of `op` at cycle t; 0: none could go, 1: some, more remain, 2: done.
  int run_group(Worker& w, uint32_t s, OpRun& op, int64_t t);
  bool memory_only(uint32_t s, const Instr& in) const;  // every DSD operand walks SRAM (no fabric, no fifo)
  const Dsd& dsd(uint32_t s, int k) const {
    const Pe& P = pes[s];
    return P.dsds.empty() ? prog(s).dsds[static_cast<size_t>(k)] : P.dsds[static_cast<size_t>(k)];
  }
  int64_t op_length(uint32_t s, const Instr& in) const;
  // A memory DSD's byte address for element i (0xffffffff below the data area: refused by the
  // access). Inline its common case, one dimension within its length (every element of most ops).
  uint32_t mem_addr(uint32_t, const Dsd& d, int64_t i) const {
    if (d.ndims == 1 && i < d.dims[0].len) return mem_byte(d, i * d.dims[0].stride);
    return mem_addr_dims(d, i);
  }
  static uint32_t mem_byte(const Dsd& d, int64_t off) {  // off: elements from the base
    const int64_t a = int64_t{d.base} + off * elem_bytes(d.elem);
    return a < 0 ? 0xffffffffu : static_cast<uint32_t>(a);
  }
  static uint32_t mem_addr_dims(const Dsd& d, int64_t i);
  std::string where(uint32_t s, int32_t instr) const;
  std::string op_wait(uint32_t s, const OpRun& op, int64_t t) const;
};

}  // namespace tessera::wafer
