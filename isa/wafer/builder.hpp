#pragma once
// Typed construction of PE programs (docs/wafer-asm.md "Building programs in code").
//
// ProgramBuilder is the one place where a Program's arrays get their addresses, its DSDs their
// bases and walks, its tasks their ids, and names (DSDs, tasks, labels) their indices, with the
// assembler's checks and messages: the assembler (asm.cpp) parses text into these calls.
//
// ProgramTemplate is a program with parameters as code builds it -- what `.param NAME`,
// `.if [!]$NAME` and `$NAME` in a number give a program text -- and the wafer compiler's output:
// instantiate() makes the Program of one parameter binding straight through a ProgramBuilder (no
// text in between); text() is the same program as assembly text (what --emit-program writes), and
// assemble(text(), b) gives the same Program as instantiate(b), line numbers included.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "isa/error.hpp"
#include "isa/wafer/isa.hpp"

namespace tessera::wafer {

using Bindings = std::map<std::string, double>;

// An instruction operand: a name (a DSD for DST/SRC/DSD roles, a task, a label) or a scalar
// (register, immediate, px, py, wv). `text` is the operand as written (messages).
struct Arg {
  std::string text;
  std::optional<Operand> scalar;
  bool reported = false;  // the assembler already reported what is wrong with it
  Arg(const char* name) : text(name) {}
  Arg(std::string name) : text(std::move(name)) {}
  Arg(Operand o);
};
Operand reg(int r);
Operand imm(int64_t v);   // a 32-bit integer immediate
Operand fimm(double v);   // an fp32 immediate (rounded to float)
inline constexpr Operand kPx{OpndKind::px, 0}, kPy{OpndKind::py, 0}, kWv{OpndKind::wv, 0};

class ProgramBuilder {
 public:
  // Diagnostics go to `d`, where "SOURCE:LINE[ PE]" (the line given by at()).
  ProgramBuilder(std::string source, std::string pe, DiagnosticList& d);
  void at(int32_t line);
  std::string where() const { return where_at(here()); }
  void error(std::string message, std::string hint = {});
  void bind(const std::string& name, double value) { prog_.params[name] = value; }

  // Arrays: at the lowest 4-byte aligned address clear of every array they may be live with
  // (without live ranges: one after another in declaration order).
  bool array_name_ok(std::string_view name);  // a valid, new array name (else reported)
  // fill= with live= is an error (an array with a live range has no content before it).
  void data(const std::string& name, Elem e, int64_t count, std::optional<float> fill = {}, int32_t live_lo = -1, int32_t live_hi = -1);
  int find_array(std::string_view name) const;  // -1 if none
  std::vector<std::string> array_names() const;
  const Program& program() const { return prog_; }

  // DSDs (a mem walk must stay inside its array).
  bool dsd_name_ok(std::string_view name);  // a valid, new DSD name (else reported)
  void fabric(const std::string& name, DsdKind kind, Elem e, int64_t color, int64_t queue, int64_t len, bool control = false, bool index = false,
              bool advance = false);
  void mem1d(const std::string& name, const std::string& array, int64_t off = 0, std::optional<int64_t> len = {}, int64_t stride = 1);
  void mem4d(const std::string& name, const std::string& array, int64_t off, const std::vector<std::pair<int64_t, int64_t>>& dims);
  void fifo(const std::string& name, const std::string& array);

  // Tasks and their bodies. end_task() closes the open task (a declaration starts; until task()
  // completes one, instructions are not reported as outside a task).
  void end_task();
  void task(const std::string& name, TaskKind kind, int64_t id, int64_t color = -1, int64_t queue = -1, bool active = false, bool blocked = false);
  void label(const std::string& name);
  // Whether an instruction may follow here (reports "instruction outside a task" once per line).
  bool instr_allowed();
  void instr(Op op, const std::vector<Arg>& args, bool async = false, const std::string& activate = {}, const std::string& unblock = {});
  void placeholder();  // a nop where a line could not be read: the task and labels keep their shape
  // Closes the last task and resolves task and label references. Errors stay in the list.
  Program finish();

 private:
  struct Ref {
    int32_t instr;
    int slot;  // operand index, -1 activate=, -2 unblock=
    std::string name;
    int32_t line;  // where it was written (where_at)
    bool task;  // else a label
  };
  void add_array(DataDecl d);
  void add_dsd(const std::string& name, const Dsd& d);
  bool new_name(std::string_view name, std::string_view what);
  int find_dsd(std::string_view name) const;
  bool operand(const OpInfo& info, size_t i, const Arg& a, Instr& in, int32_t index);
  bool dsd_rules(const OpInfo& info, const Instr& in);
  void push(Instr in);

  Program prog_;
  // Name -> index of the first DSD and array of that name (a program of ~1,000 kernels declares
  // ~15,000 DSDs: a linear search per operand made building it quadratic).
  std::unordered_map<std::string, int> dsd_at_, array_at_;
  DiagnosticList& diags_;
  std::string pe_;
  // "SOURCE:LINE[ PE]", built only for a diagnostic (a program instantiated for each of 36,864 PEs
  // built it for every line: most of the compile); line < 0: the source alone.
  std::string where_at(int32_t line) const;
  int32_t here() const { return at_called_ ? line_ : -1; }  // the line for where_at
  int32_t line_ = 0;
  bool at_called_ = false;
  bool in_task_ = false, bad_task_ = false;
  std::vector<std::pair<std::string, int32_t>> pending_labels_;  // (name, line)
  std::vector<Ref> refs_;
};

class ProgramTemplate {
 public:
  // A number: a literal, or the value of a parameter (`$NAME` in the text).
  struct Num {
    int64_t value = 0;
    std::string param;
    Num(int64_t v) : value(v) {}
    Num(int v) : value(v) {}
    static Num of(std::string name) {
      Num n(0);
      n.param = std::move(name);
      return n;
    }
  };

  ProgramTemplate() = default;
  explicit ProgramTemplate(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  void param(const std::string& name);                 // `.param NAME` (bound by the layout)
  void comment(const std::string& text);               // `# text`
  void if_(const std::string& param, bool want = true);  // `.if $NAME` (want) or `.if !$NAME`
  void else_();
  void endif();

  // `note` is a comment after the line.
  void data(const std::string& name, Elem e, int64_t count, std::optional<float> fill = {}, int32_t live_lo = -1, int32_t live_hi = -1,
            const std::string& note = {});
  void fabric(const std::string& name, DsdKind kind, Elem e, Num color, int64_t queue, Num len, bool control = false, bool index = false,
              bool advance = false);
  void mem1d(const std::string& name, const std::string& array, Num off = 0, std::optional<int64_t> len = {}, int64_t stride = 1,
             const std::string& note = {});
  void mem4d(const std::string& name, const std::string& array, Num off, const std::vector<std::pair<Num, int64_t>>& dims,
             const std::string& note = {});
  void fifo(const std::string& name, const std::string& array);
  void task(const std::string& name, TaskKind kind, int id, int color = -1, int queue = -1, bool active = false, bool blocked = false,
            const std::string& note = {});
  void label(const std::string& name);
  void op(Op op, const std::vector<Arg>& args, const std::string& note = {});
  // An async DSD op: completion activates and/or unblocks a task (names, "" for none).
  void op_async(Op op, const std::vector<Arg>& args, const std::string& activate = {}, const std::string& unblock = {},
                const std::string& note = {});

  // The Program of one binding (every parameter bound; a bound name the template does not declare
  // is an error). Diagnostics go to `d` (where "SOURCE:LINE[ PE]", LINE in text()).
  Program instantiate(const Bindings& b, const std::string& pe, DiagnosticList& d) const;
  Program instantiate(const Bindings& b) const;  // throws InputError
  std::string text() const;
  // The cycles of its DSD instructions over `len` elements at stride 1 (dsd_cycles: each op at its
  // own SIMD width and interval), in every branch of its conditional parts (what a generator
  // emits) -- what the estimate charges a function.
  int64_t dsd_cycles(int64_t len, const WaferConfig& c) const;

 private:
  enum class Kind : uint8_t { comment, cond_if, cond_else, cond_end, data, dsd, task, label, instr };
  struct Item {
    Kind kind = Kind::comment;
    std::string name, array, note;
    // data
    Elem elem = Elem::f32;
    int64_t count = 0;
    std::optional<float> fill;
    int32_t live_lo = -1, live_hi = -1;
    // dsd: kind, color, queue, len (fabric); off, len, stride, dims (mem)
    DsdKind dkind = DsdKind::mem1d;
    Num color = 0, len = 0, off = 0;
    int64_t queue = 0, stride = 1;
    std::optional<int64_t> len1;
    bool control = false, index = false, advance = false;
    std::vector<std::pair<Num, int64_t>> dims;
    // task
    TaskKind tkind = TaskKind::local;
    int id = 0, tcolor = -1, tqueue = -1;
    bool active = false, blocked = false;
    // cond
    bool want = true;
    // instr
    Op op = Op::nop;
    std::vector<Arg> args;
    bool async = false;
    std::string activate, unblock;
  };
  Item& add(Kind kind, const std::string& name = {}, const std::string& note = {});
  std::string line_text(const Item& it) const;
  std::string source_;
  std::vector<std::string> params_;
  // (Declared parameters by name: a compiled program declares hundreds, instantiated for every PE
  // of a rectangle whose parameters differ -- a linear search per bound name and per use was most
  // of ConvNeXt-tiny's compile on 36,864 PEs.)
  std::unordered_map<std::string, size_t> param_at_;
  bool declared(const std::string& p) const { return param_at_.count(p) != 0; }
  std::vector<Item> items_;
};

}  // namespace tessera::wafer
