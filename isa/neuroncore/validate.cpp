// Hardware-rule checks of NeuronCore programs. Every rule appends a diagnostic and carries on,
// so that one run reports every violation in the program.
#include "isa/neuroncore/validate.hpp"

#include <algorithm>
#include <string>

#include "isa/error.hpp"

namespace tessera::neuroncore {

namespace {

enum Field { kDst, kSrc0, kSrc1, kAux };

const AccessPattern& field(const Instr& in, Field f) {
  switch (f) {
    case kDst: return in.dst;
    case kSrc0: return in.src0;
    case kSrc1: return in.src1;
    default: return in.aux;
  }
}

// The name an operand has in the op's syntax (docs/neuroncore-asm.md).
std::string role(Op op, Field f) {
  if (f == kDst) return "dst";
  switch (op) {
    case Op::tensor_tensor: return f == kSrc0 ? "src0" : "src1";
    case Op::select: return f == kSrc0 ? "pred" : f == kSrc1 ? "on_true" : "on_false";
    case Op::gather: return f == kSrc0 ? "table" : "indices";
    case Op::activation: return f == kSrc0 ? "src" : f == kSrc1 ? "bias" : "acc";
    case Op::tensor_scalar: return f == kSrc0 ? "src" : f == kSrc1 ? "imm" : "imm1";
    default: return f == kSrc0 ? "src" : f == kSrc1 ? "src1" : "aux";
  }
}

// Operands each op must have.
std::vector<Field> needed(Op op) {
  switch (op) {
    case Op::load_stationary: return {kSrc0};
    case Op::memset:
    case Op::iota: return {kDst};
    case Op::tensor_tensor:
    case Op::gather: return {kDst, kSrc0, kSrc1};
    case Op::select: return {kDst, kSrc0, kSrc1, kAux};
    case Op::multiply_moving:
    case Op::transpose:
    case Op::tensor_scalar:
    case Op::tensor_reduce:
    case Op::tensor_copy:
    case Op::transpose32:
    case Op::bn_stats:
    case Op::bn_aggr:
    case Op::activation:
    case Op::affine_select:
    case Op::partition_all_reduce:
    case Op::dma: return {kDst, kSrc0};
    default: return {};
  }
}

bool is_branch(Op op) { return op == Op::dec_branch_nz || op == Op::branch_nz || op == Op::jump; }
bool uses_reg(Op op) { return op == Op::set_reg || op == Op::add_reg || op == Op::dec_branch_nz || op == Op::branch_nz; }
bool is_int(DType t) { return t == DType::i8 || t == DType::u8 || t == DType::i16 || t == DType::i32 || t == DType::i64; }

std::string shape(const AccessPattern& ap) { return "[" + std::to_string(ap.parts) + " x " + std::to_string(ap.free_elems()) + "]"; }

class Checker {
 public:
  Checker(const Program& p, const CoreConfig& c) : p_(p), c_(c) {}

  void run() {
    hbm_decls();
    for (const auto& [name, index] : p_.labels)
      if (index < 0 || static_cast<size_t>(index) >= p_.bundles.size())
        d_.add("label " + name, "label names bundle " + std::to_string(index) + ", outside the program's " + std::to_string(p_.bundles.size()) + " bundles");
    for (size_t b = 0; b < p_.bundles.size(); ++b)
      for (int l = 0; l < kLanes; ++l) {
        const int32_t s = p_.bundles[b].slot[static_cast<size_t>(l)];
        if (s < 0) continue;
        where_ = "bundle " + std::to_string(b) + " lane " + std::string(lane_name(static_cast<Lane>(l)));
        if (static_cast<size_t>(s) >= p_.instrs.size()) {
          err("slot refers to instruction " + std::to_string(s) + " of " + std::to_string(p_.instrs.size()));
          continue;
        }
        const Instr& in = p_.instrs[static_cast<size_t>(s)];
        const int line = in.line ? in.line : p_.bundles[b].line;
        if (!p_.source.empty()) where_ += " (" + p_.source + ":" + std::to_string(line) + ")";
        else if (line) where_ += " (line " + std::to_string(line) + ")";
        instr(in, static_cast<Lane>(l));
      }
    d_.throw_if_any();
  }

 private:
  void err(std::string message, std::string hint = {}) { d_.add(where_, std::move(message), std::move(hint)); }

  void hbm_decls() {
    std::vector<std::pair<const HbmTensor*, int64_t>> spans;  // tensor, bytes
    for (const auto& t : p_.hbm) {
      int64_t n = static_cast<int64_t>(dtype_size(t.dtype));
      for (int64_t s : t.shape) n *= s;
      if (t.offset < 0 || static_cast<double>(t.offset + n) > c_.hbm_capacity)
        d_.add(".hbm " + t.name, "HBM tensor bytes [" + std::to_string(t.offset) + ", " + std::to_string(t.offset + n) +
                                     ") beyond the HBM capacity of " + std::to_string(static_cast<int64_t>(c_.hbm_capacity)) + " bytes (hbm.capacity)");
      spans.emplace_back(&t, n);
    }
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.first->offset < b.first->offset; });
    for (size_t i = 1; i < spans.size(); ++i) {
      const auto& [prev, prev_n] = spans[i - 1];
      if (spans[i].first->offset < prev->offset + prev_n)
        d_.add(".hbm " + spans[i].first->name, "HBM tensors '" + prev->name + "' and '" + spans[i].first->name + "' overlap",
               "'" + prev->name + "' ends at byte " + std::to_string(prev->offset + prev_n));
    }
  }

  void instr(const Instr& in, Lane lane) {
    const std::string op(op_name(in.op));
    // Lane placement.
    const bool dma_lane = lane == Lane::dma0 || lane == Lane::dma1;
    if (in.op != Op::nop && (in.op == Op::dma ? !dma_lane : op_lane(in.op) != lane))
      err(op + " in lane " + std::string(lane_name(lane)) + ": it runs on lane " +
          (in.op == Op::dma ? std::string("dma0 or dma1") : std::string(lane_name(op_lane(in.op)))));
    bool complete = true;
    for (Field f : needed(in.op))
      if (!field(in, f).present()) {
        err(op + " needs a " + role(in.op, f) + " operand");
        complete = false;
      }
    for (Field f : {kDst, kSrc0, kSrc1, kAux})
      if (field(in, f).present()) operand(in, f);
    if (complete) rules(in, op);
    // Registers, semaphores, queues, targets.
    if (uses_reg(in.op) && (in.reg < 0 || in.reg >= kRegs)) err("register r" + std::to_string(in.reg) + " outside r0-r" + std::to_string(kRegs - 1));
    if ((in.op == Op::sem_wait || in.op == Op::sem_signal) && (in.sem < 0 || in.sem >= kSemaphores))
      err("semaphore s" + std::to_string(in.sem) + " outside s0-s" + std::to_string(kSemaphores - 1));
    if (in.op == Op::dma) {
      if (in.sem < -1 || in.sem >= kSemaphores)
        err("signal semaphore s" + std::to_string(in.sem) + " outside s0-s" + std::to_string(kSemaphores - 1));
      const int64_t queues = c_.dma_engines * c_.dma_queues_per_engine;
      if (spread_queue(in.queue) ? -in.queue >= c_.dma_queues_per_engine : in.queue >= queues)
        err(spread_queue(in.queue) ? "DMA queue all" + std::to_string(-in.queue) + ": engines have queues 0-" + std::to_string(c_.dma_queues_per_engine - 1)
                                   : "DMA queue " + std::to_string(in.queue) + " outside [0, " + std::to_string(queues) + ")",
            "queues number dma.engines x dma.queues_per_engine");
    }
    if (is_branch(in.op) && (in.target < 0 || static_cast<size_t>(in.target) >= p_.bundles.size()))
      err("branch target bundle " + std::to_string(in.target) + " outside the program's " + std::to_string(p_.bundles.size()) + " bundles");
  }

  // Structure, partitions and bounds of one operand.
  void operand(const Instr& in, Field f) {
    const AccessPattern& ap = field(in, f);
    const std::string r = role(in.op, f) + " ";
    bool ok = ap.ndims >= 1 && ap.ndims <= 4;
    for (int i = 0; ok && i < ap.ndims; ++i) ok = ap.dims[static_cast<size_t>(i)].num >= 1 && ap.dims[static_cast<size_t>(i)].stride >= 0;
    if (!ok) return err(r + "malformed: 1-4 free dims with counts >= 1 and strides >= 0");
    if (ap.offset_reg < -1 || ap.offset_reg >= kRegs)
      err(r + "offset register r" + std::to_string(ap.offset_reg) + " outside r0-r" + std::to_string(kRegs - 1));
    const auto [lo, hi] = ap.free_byte_range();
    if (ap.space == Space::hbm) {
      const int64_t end = hi + (ap.parts - 1) * ap.part_stride * static_cast<int64_t>(dtype_size(ap.dtype));
      if (lo < 0 || ap.part_stride < 0 || static_cast<double>(end) > c_.hbm_capacity)
        err(r + "HBM bytes [" + std::to_string(lo) + ", " + std::to_string(end) + ") beyond the HBM capacity of " +
            std::to_string(static_cast<int64_t>(c_.hbm_capacity)) + " bytes (hbm.capacity)");
      return;
    }
    const std::string mem = ap.space == Space::sbuf ? "SBUF" : "PSUM";
    if (ap.part_start < 0 || ap.part_start + static_cast<int64_t>(ap.parts) > c_.partitions)
      err(r + "partitions " + std::to_string(ap.part_start) + "-" + std::to_string(ap.part_start + ap.parts - 1) + " outside the " +
          std::to_string(c_.partitions) + " partitions [0, " + std::to_string(c_.partitions) + ")");
    // Engines access partitions in aligned groups; DMA engines address partitions one by one.
    if (in.op != Op::dma) {
      const int32_t s = ap.part_start, n = ap.parts;
      if (n <= 32 && s % 32 != 0)
        err(r + "partition start " + std::to_string(s) + " for " + std::to_string(n) + " partitions: operands over <= 32 partitions start at 0, 32, 64 or 96");
      else if (n > 32 && n <= 64 && s % 64 != 0)
        err(r + "partition start " + std::to_string(s) + " for " + std::to_string(n) + " partitions: operands over 33-64 partitions start at 0 or 64");
      else if (n > 64 && s != 0)
        err(r + "partition start " + std::to_string(s) + " for " + std::to_string(n) + " partitions: operands over more than 64 partitions start at 0");
    }
    const int64_t cap = ap.space == Space::sbuf ? c_.sbuf_partition_bytes : c_.psum_partition_bytes;
    if (lo < 0 || hi > cap)
      err(r + mem + " bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ") beyond the " + std::to_string(cap) + " bytes of a partition (" +
              (ap.space == Space::sbuf ? "sbuf" : "psum") + ".partition_bytes)",
          ap.offset_reg >= 0 ? "checked for the static part of the offset" : "");
  }

  void in_space(const Instr& in, Field f, Space s, const std::string& why) {
    const AccessPattern& ap = field(in, f);
    if (ap.space != s) err(role(in.op, f) + " in " + std::string(space_name(ap.space)) + ": " + why);
  }

  void same_shape(const Instr& in, Field a, Field b, const std::string& op) {
    const AccessPattern &x = field(in, a), &y = field(in, b);
    if (x.parts != y.parts || x.free_elems() != y.free_elems())
      err(role(in.op, a) + " " + shape(x) + " and " + role(in.op, b) + " " + shape(y) + " differ: " + op +
          " is elementwise (partitions and elements per partition agree)");
  }

  void per_partition(const Instr& in, Field f, int64_t free, const std::string& what) {
    const AccessPattern &x = field(in, f), &d = in.dst;
    const AccessPattern& ref = f == kDst ? in.src0 : d;
    if (x.parts != ref.parts || (free > 0 && x.free_elems() != free))
      err(role(in.op, f) + " " + shape(x) + ": " + what + " is [" + std::to_string(ref.parts) + " x " + std::to_string(free) + "]");
  }

  void in_bank(const Instr& in, Field f) {
    const auto [lo, hi] = field(in, f).free_byte_range();
    const int64_t bank = c_.psum_bank_bytes();
    if (bank > 0 && lo >= 0 && hi > lo && lo / bank != (hi - 1) / bank)
      err(role(in.op, f) + " PSUM bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ") cross a bank boundary: the tensor engine writes one " +
              std::to_string(bank) + "-byte PSUM bank",
          "start it at a multiple of " + std::to_string(bank) + " bytes");
  }

  void rules(const Instr& in, const std::string& op) {
    const AccessPattern &dst = in.dst, &src = in.src0;
    const Lane unit = op_lane(in.op);
    if (unit == Lane::vector || unit == Lane::scalar || unit == Lane::gpsimd)
      for (Field f : {kDst, kSrc0, kSrc1, kAux})
        if (field(in, f).present() && field(in, f).space == Space::hbm)
          err(role(in.op, f) + " in hbm: " + std::string(lane_name(unit)) + " ops read and write SBUF or PSUM, not HBM", "move it with a dma first");
    switch (in.op) {
      case Op::load_stationary:
        in_space(in, kSrc0, Space::sbuf, "the tensor engine reads SBUF");
        if (src.parts > c_.tensor_rows) err("load_stationary K = " + std::to_string(src.parts) + " partitions exceeds tensor.rows " + std::to_string(c_.tensor_rows));
        if (src.free_elems() > c_.tensor_cols)
          err("load_stationary M = " + std::to_string(src.free_elems()) + " elements exceeds tensor.cols " + std::to_string(c_.tensor_cols));
        break;
      case Op::multiply_moving: {
        in_space(in, kSrc0, Space::sbuf, "the tensor engine reads SBUF");
        in_space(in, kDst, Space::psum, "multiply_moving writes PSUM");
        if (dst.dtype != DType::f32) err("dst " + std::string(dtype_name(dst.dtype)) + ": multiply_moving accumulates fp32 in PSUM", "write ps.fp32[...]");
        const int64_t n = src.free_elems();
        if (dst.parts > c_.tensor_cols) err("multiply_moving M = " + std::to_string(dst.parts) + " dst partitions exceeds tensor.cols " + std::to_string(c_.tensor_cols));
        if (src.parts > c_.tensor_rows) err("multiply_moving K = " + std::to_string(src.parts) + " src partitions exceeds tensor.rows " + std::to_string(c_.tensor_rows));
        if (n > c_.max_moving_free) err("multiply_moving N = " + std::to_string(n) + " exceeds tensor.max_moving_free " + std::to_string(c_.max_moving_free));
        if (dst.free_elems() != n) err("dst has " + std::to_string(dst.free_elems()) + " elements per partition, src N = " + std::to_string(n) + ": they agree");
        if (dst.space == Space::psum) in_bank(in, kDst);
        break;
      }
      case Op::transpose:
        in_space(in, kSrc0, Space::sbuf, "the tensor engine reads SBUF");
        in_space(in, kDst, Space::psum, "transpose writes PSUM");
        if (src.parts > c_.tensor_rows) err("transpose P = " + std::to_string(src.parts) + " partitions exceeds tensor.rows " + std::to_string(c_.tensor_rows));
        if (src.free_elems() > c_.tensor_cols) err("transpose F = " + std::to_string(src.free_elems()) + " exceeds tensor.cols " + std::to_string(c_.tensor_cols));
        if (dst.parts != src.free_elems() || dst.free_elems() != src.parts)
          err("dst " + shape(dst) + " is not the transpose of src " + shape(src) + ": transpose writes [F x P]");
        if (dst.space == Space::psum) in_bank(in, kDst);
        break;
      case Op::tensor_tensor:
        same_shape(in, kDst, kSrc0, op);
        same_shape(in, kDst, kSrc1, op);
        break;
      case Op::select:
        same_shape(in, kDst, kSrc0, op);
        same_shape(in, kDst, kSrc1, op);
        same_shape(in, kDst, kAux, op);
        break;
      case Op::tensor_scalar:
        same_shape(in, kDst, kSrc0, op);
        if (in.src1.present()) per_partition(in, kSrc1, 1, "a tensor_scalar operand");
        if (in.aux.present()) per_partition(in, kAux, 1, "a tensor_scalar operand");
        break;
      case Op::tensor_copy:
      case Op::affine_select:
      case Op::partition_all_reduce: same_shape(in, kDst, kSrc0, op); break;
      case Op::activation:
        same_shape(in, kDst, kSrc0, op);
        if (in.src1.present()) per_partition(in, kSrc1, 1, "an activation bias");
        if (in.aux.present()) per_partition(in, kAux, 1, "an activation accumulator");
        break;
      case Op::transpose32:
        same_shape(in, kDst, kSrc0, op);
        if (src.parts % 32 != 0 || src.free_elems() % 32 != 0)
          err("src " + shape(src) + ": transpose32 transposes 32x32 blocks, so partitions and elements are multiples of 32");
        break;
      case Op::tensor_reduce: per_partition(in, kDst, 1, "a tensor_reduce result"); break;
      case Op::bn_stats: per_partition(in, kDst, 6, "a bn_stats result"); break;
      case Op::bn_aggr:
        per_partition(in, kDst, 2, "a bn_aggr result");
        if (src.free_elems() % 6 != 0) err("src " + shape(src) + ": bn_aggr reads bn_stats records of 6 elements");
        break;
      case Op::gather:
        if (in.src0.parts != dst.parts || in.src1.parts != dst.parts || in.src1.free_elems() != dst.free_elems())
          err("gather shapes: dst " + shape(dst) + ", table " + shape(in.src0) + ", indices " + shape(in.src1) +
              ": table and indices have dst's partitions, indices dst's elements");
        if (!is_int(in.src1.dtype)) err("indices " + std::string(dtype_name(in.src1.dtype)) + ": gather indices are an integer dtype");
        break;
      case Op::dma: dma(in); break;
      default: break;
    }
  }

  void dma(const Instr& in) {
    const AccessPattern &dst = in.dst, &src = in.src0;
    if (dst.space == Space::psum || src.space == Space::psum)
      err("PSUM is not a DMA endpoint: DMAs move HBM<->SBUF and SBUF<->SBUF", "copy PSUM to SBUF with a vector tensor_copy first");
    else if (dst.space == Space::hbm && src.space == Space::hbm)
      err("dma between two HBM operands: DMAs move HBM<->SBUF and SBUF<->SBUF", "stage it through SBUF");
    if (dst.elems() != src.elems())
      err("dma moves " + std::to_string(src.elems()) + " src elements " + shape(src) + " into " + std::to_string(dst.elems()) + " dst elements " +
          shape(dst) + ": element counts agree");
    if (dst.dtype != src.dtype)
      err("dma copies bytes: dst " + std::string(dtype_name(dst.dtype)) + " and src " + std::string(dtype_name(src.dtype)) + " differ",
          "convert with a vector tensor_copy");
  }

  const Program& p_;
  const CoreConfig& c_;
  DiagnosticList d_;
  std::string where_;
};

}  // namespace

void validate(const Program& p, const CoreConfig& c) { Checker(p, c).run(); }

}  // namespace tessera::neuroncore
