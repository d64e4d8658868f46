// The schema of tessera.scenario/1. Later capabilities add fields here; nothing is ignored.
#include <nlohmann/json.hpp>

#include "sim/scenario.hpp"

namespace tessera::sim {

using namespace tessera::schema;
using json = nlohmann::json;

namespace {

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return s != "." && s != "..";
}

NodePtr name_node(std::string description) {
  auto n = string(std::move(description));
  n->check = [](const json& v, const std::string& p, DiagnosticList& d) {
    if (v.is_string() && !valid_name(v.get<std::string>()))
      d.add(p, "name " + v.dump() + " is not usable as a directory name",
            "use letters, digits, '_', '-' and '.' (at most 128 characters)");
  };
  return n;
}

NodePtr build() {
  const double inf = 1e300;
  auto param_value = any("a parameter value: a number, a quantity string such as \"410GB/s\", true/false, or a list of integers");
  auto params = with_default(map_of(param_value, "hardware parameter overrides (see 'tessera params TARGET')"), json::object());
  params->dotted_keys = true;

  auto target = object({
      req("kind", enumeration({"reference", "neuroncore", "wafer"},
                              "reference = the golden interpreter on the CPU; neuroncore, wafer = the simulated machines")),
      opt("preset", string("hardware preset: trn1, inf2 (the same NeuronCore-v2 figures) or trn2 for neuroncore, wse2 or wse3 for wafer (default: the first)")),
      opt("params", params),
  }, "which machine to run on");

  auto dims = array_of(integer(0, 1e12, "a dimension"), "a shape, e.g. [8, 64]");
  auto dtype = with_default(enumeration({"fp32", "fp64", "fp16", "bf16", "int64", "int32", "bool"}, "element type"), "fp32");
  auto graph_input = object({req("shape", dims), opt("dtype", dtype)}, "a graph input");
  auto init_random = object({
      opt("seed", with_default(integer(0, 9.0e15, "random seed"), 0)),
      opt("dist", with_default(enumeration({"normal", "uniform"}, "distribution"), "normal")),
      opt("scale", with_default(number(0, inf, "standard deviation or half-width"), 1.0)),
  }, "seeded random values");
  auto initializer = object({
      opt("shape", dims),
      opt("dtype", dtype),
      opt("values", array_of(number(-inf, inf), "the values, row-major")),
      opt("file", path("a .npy file")),
      opt("random", init_random),
  }, "a weight: inline values, a .npy file, or seeded random values");
  initializer->exactly_one_of = {"values", "file", "random"};
  auto graph_node = object({
      opt("name", string("node name (default: <op>_<index>)")),
      req("op", string("ONNX op type, e.g. MatMul")),
      req("inputs", array_of(string(), "input tensor names (\"\" for an absent optional input)")),
      req("outputs", array_of(string(), "output tensor names")),
      opt("attrs", with_default(map_of(any("an attribute: integer, number, string or a list of one of those"), "ONNX attributes"), json::object())),
  }, "one op");
  auto graph = object({
      opt("opset", with_default(integer(7, 18, "ai.onnx opset whose semantics the nodes follow"), 17)),
      req("inputs", map_of(graph_input, "runtime inputs by name")),
      req("outputs", array_of(string(), "output tensor names")),
      opt("initializers", with_default(map_of(initializer, "weights by name"), json::object())),
      req("nodes", array_of(graph_node, "ops in any order")),
  }, "an inline dataflow graph with ONNX op semantics");
  auto random = object({
      opt("seed", with_default(integer(0, 9.0e15, "random seed"), 0)),
      opt("dist", with_default(enumeration({"normal", "uniform"}, "normal(0, scale) or uniform(-scale, scale)"), "normal")),
      opt("scale", with_default(number(0, inf, "standard deviation (normal) or half-width (uniform)"), 1.0)),
  }, "seeded random values");
  auto input = object({
      opt("file", path("a .npy file of the input's dtype (fp32 for bf16, cbf16 and fp8 inputs, which NumPy lacks)")),
      opt("random", random),
      opt("cast", with_default(boolean("convert a .npy of another dtype to the input's dtype as it loads (without it, a dtype mismatch is an error)"), false)),
  }, "one model input: a .npy file or seeded random values");
  input->exactly_one_of = {"file", "random"};

  auto mx_tensor = object({
      req("shape", dims),
      opt("file", path("a .npy file of the initial values")),
      opt("random", random),
  }, "an fp32 master-weight tensor in MemoryX");
  mx_tensor->exactly_one_of = {"file", "random"};
  auto memoryx = object({
      opt("tensors", with_default(map_of(mx_tensor, "master weights by name (an output may name one: its values after the run)"), json::object())),
      opt("optimizer", with_default(object({
          opt("kind", with_default(enumeration({"sgd"}, "the update MemoryX applies to a reduced gradient: w -= learning_rate * g"), "sgd")),
          opt("learning_rate", with_default(number(0, 1e6, "learning rate"), 0.01)),
      }, "the optimizer MemoryX applies"), json::object())),
  }, "wafer layouts: the MemoryX weight store (docs/wafer-model.md)");
  auto broadcast = object({
      req("tensor", string("a MemoryX tensor")),
      req("ports", array_of(string(), "input ports of the layout; every lane of each gets the whole tensor")),
  }, "a weight stream MemoryX -> SwarmX -> edge ports");
  auto reduce = object({
      req("ports", array_of(string(), "output ports of the layout; each lane's stream is one gradient")),
      req("tensor", string("the MemoryX tensor the summed gradient updates")),
  }, "a gradient stream edge ports -> SwarmX (sum) -> MemoryX (optimizer)");
  auto swarmx = object({
      opt("broadcast", with_default(array_of(broadcast, "weight streams, sent when the run starts"), json::array())),
      opt("reduce", with_default(array_of(reduce, "gradient streams, reduced when their ports have collected"), json::array())),
  }, "wafer layouts: the SwarmX broadcast/reduce tree between MemoryX and the edge ports");
  auto model = object({
      opt("onnx", path("an ONNX model file")),
      opt("graph", graph),
      opt("program", path("a hand-written NeuronCore assembly program (docs/neuroncore-asm.md); with onnx or graph, that model is the reference its outputs are checked against")),
      opt("layout", path("a hand-written wafer layout: PE programs and routes (docs/wafer-asm.md)")),
      opt("read", array_of(string(), "wafer layouts: what to read back as outputs -- PE arrays, output ports or MemoryX tensors (default: the names under /expect/outputs)")),
      opt("memoryx", memoryx),
      opt("swarmx", swarmx),
  }, "the model: an ONNX file or an inline graph, or a hand-written program");
  model->check = [](const json& v, const std::string& p, DiagnosticList& d) {
    if (!v.is_object()) return;
    const bool has_onnx = v.contains("onnx"), has_graph = v.contains("graph"), has_program = v.contains("program") || v.contains("layout");
    if (has_onnx && has_graph) d.add(p, "gives onnx and graph; give one of them", "a model is an ONNX file or an inline graph");
    if (!has_onnx && !has_graph && !has_program) d.add(p, "needs one of: onnx, graph, program, layout");
  };


  auto precision = with_default(object({
      opt("compute", with_default(enumeration({"fp32", "bf16", "fp16", "cbf16", "fp8_e4m3", "fp8_e5m2"},
                                              "format of the multiplicands on the machine"), "fp32")),
      opt("accumulate", with_default(enumeration({"fp32"}, "format of accumulations (PSUM, fmacs)"), "fp32")),
  }, "numeric precision"), json::object());

  auto micro_batch = any("wafer, weight streaming, inference: samples per run of the compiled program: \"auto\" (the whole batch when a PE's "
      "data fits its SRAM, else the largest divisor of the batch that fits) or a number that divides the batch; each micro-batch streams "
      "the weights again (docs/wafer-compiler.md \"Micro-batches\")");
  micro_batch->check = [](const json& v, const std::string& p, DiagnosticList& d) {
    if (!(v == "auto" || (v.is_number_integer() && v.get<int64_t>() >= 1)))
      d.add(p, "is " + v.dump() + "; give \"auto\" or a whole number of samples (at least 1)", "e.g. \"micro_batch\": 1");
  };
  auto mapping = with_default(object({
      opt("mode", with_default(enumeration({"auto", "weight_streaming", "pipelined"},
                                           "how weights reach the compute: streamed layer by layer, or resident"), "auto")),
      opt("tile_m", integer(1, 128, "NeuronCore: partitions of a matmul output tile (default: the array's 128 columns)")),
      opt("tile_n", integer(1, 512, "NeuronCore: free size of a matmul output tile (default: one PSUM bank, 512 fp32)")),
      opt("buffers", integer(1, 64, "NeuronCore: buffers per streamed weight tile (default: enough to cover a transfer with matmuls)")),
      opt("matmul_schedule", with_default(enumeration({"auto", "tiled", "hoisted", "blocked_mn", "blocked_mnk"},
          "NeuronCore: matmul loop nest; tiled, hoisted, blocked_mn and blocked_mnk are the NKI matmul tutorial's four steps "
          "(docs/neuroncore-compiler.md)"), "auto")),
      opt("wafer_block", integer(1, 4096, "wafer, pipelined: the weight block edge per PE (default: the smallest that fits the fabric and SRAM)")),
      opt("wafer_rect", array_of(integer(1, 4096, "PEs"), "wafer, weight streaming: the rectangle [width, height] every layer runs on (default: as large as useful)")),
      opt("micro_batch", with_default(micro_batch, "auto")),
      opt("block_m", integer(1, 1024, "NeuronCore, blocked schedules: stationary (M) tiles per block (default 2, blocked_mnk 16)")),
      opt("block_n", integer(1, 1024, "NeuronCore, blocked schedules: moving (N) tiles per block (default 2)")),
      opt("block_k", integer(1, 1024, "NeuronCore, blocked_mnk: contraction (K) tiles per block (default 8)")),
      opt("fuse_attention", with_default(boolean("NeuronCore: compile MatMul -> Softmax -> MatMul (attention) as one fused kernel whose "
          "scores stay on chip, where it fits; false: each node its own kernel"), true)),
      opt("attention_kernel", with_default(enumeration({"auto", "one_bank", "key_blocks"},
          "NeuronCore: the fused attention kernel for keys within one PSUM bank (512): one_bank (a row of scores per bank, heads in pairs) "
          "or key_blocks (an online softmax over key blocks, four query tiles side by side; longer key ranges always use it); auto "
          "compiles both and keeps the faster by the estimate"), "auto")),
      opt("fuse_norm", with_default(boolean("NeuronCore: normalise a LayerNormalization over the last axis of a MatMul's result in the "
          "matmul's kernel, before it is stored; false: the LayerNorm its own kernel, the result through HBM"), true)),
      opt("prefetch_weights", with_default(boolean("NeuronCore: load matmuls' constant weights into SBUF while earlier kernels leave the DMA "
          "engines idle (planned from the estimate, kept when it predicts a faster program); false: each matmul streams its own weights"), true)),
  }, "compiler choices"), json::object());

  auto threads = any("wafer: host threads simulating the fabric, each a stripe of PE rows: \"auto\" (the host's cores, or TESSERA_HOST_THREADS) "
      "or a number from 1 to 256; every result is the same as on one thread (docs/wafer-model.md, \"Threads\"). "
      "Not part of the report's scenario (host.json has it)");
  threads->check = [](const json& v, const std::string& p, DiagnosticList& d) {
    if (!(v == "auto" || (v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= 256)))
      d.add(p, "is " + v.dump() + "; give \"auto\" or a whole number of threads from 1 to 256", "e.g. \"threads\": 2 (or --threads 2)");
  };
  auto run = with_default(object({
      opt("steps", with_default(integer(1, 1e9, "number of steps to run (the program is compiled once; inputs per step: docs/session.md)"), 1)),
      opt("checkpoint_steps", with_default(integer(0, 1e9, "checkpoint every k steps: 0-indexed steps k-1, 2k-1, ... and the last (0: none)"), 0)),
      opt("activation_steps", with_default(integer(1, 1e9, "closures run every n steps ((step + 1) % n == 0) and on the last; reduced to its gcd with the checkpoint steps + 1"), 1)),
      opt("numerics", with_default(boolean("false = timing only (no tensor values computed)"), true)),
      opt("max_time", with_default(quantity(UnitKind::time, 1e-9, 1e6, "watchdog: stop a machine run that has not finished after this much simulated time"), "10s")),
      opt("threads", with_default(threads, "auto")),
      opt("host_memory", with_default(quantity(UnitKind::bytes, 1048576, 1e15, "host memory the run may take (inputs, the reference executor's values, the machine's memory: HBM, the wafer fabric's state); a run that needs more stops before it allocates, naming what it needs"), "16GiB")),
      opt("faults", with_default(array_of(object({
          req("kind", enumeration({"sram_bit_flip", "sram_bit_force", "drop_wavelets"},
                                  "the fault: flip one bit of an element of a PE array, force it to `value`, or drop wavelets leaving a router")),
          req("pe", array_of(integer(0, 4096, "coordinate"), "[x, y] of the PE (drop_wavelets: of the router the wavelets leave)")),
          opt("array", string("sram_*: the PE program's .data array")),
          opt("element", with_default(integer(0, 1e9, "sram_*: element index in the array"), 0)),
          opt("bit", with_default(integer(0, 31, "sram_*: bit of the element's storage (fp32: 31 sign, 30-23 exponent)"), 30)),
          opt("value", with_default(integer(0, 1, "sram_bit_force: the value the bit is forced to"), 0)),
          opt("cycle", with_default(integer(0, 1e15, "fabric cycle, from the run's start, at which an SRAM fault fires (0: before the first instruction) or from which wavelets are dropped"), 0)),
          opt("direction", enumeration({"N", "S", "E", "W", "RAMP"}, "drop_wavelets: the link (RAMP: delivery into the router's own PE)")),
          opt("color", integer(0, 31, "drop_wavelets: the color")),
          opt("count", with_default(integer(1, 1e15, "drop_wavelets: how many wavelets at most"), 1)),
      }, "one fault"), "wafer: faults to inject (resilience studies; proof that outputs come from the machine)"), json::array())),
  }, "how to run"), json::object());

  auto expect_output = object({
      opt("file", path("expected values as .npy; without it the tolerance applies to the check against the reference model")),
      opt("rtol", with_default(number(0, inf, "relative tolerance"), 1e-4)),
      opt("atol", with_default(number(0, inf, "absolute tolerance"), 1e-5)),
  }, "expected values of one output: pass when |actual - expected| <= atol + rtol*|expected|");
  auto reference_latency = object({
      req("value", quantity(UnitKind::time, 0, inf, "published latency, e.g. \"0.943ms\"")),
      req("source", string("where the figure comes from")),
      opt("upper_bound", with_default(boolean("the figure is an upper bound (a test threshold, e.g. nki-samples' `assert p50 <= N`), not a measurement: "
                                              "printed as a bound, left out of compare's MAPE and counted as within or above it"), false)),
  }, "a published latency to print next to the simulated one");
  auto expect = with_default(object({
      opt("outputs", with_default(map_of(expect_output, "expected outputs by name"), json::object())),
      opt("max_rel_error", number(0, inf, "fail when any output's max relative error exceeds this")),
      opt("latency_error_pct", number(0, inf, "fail when |predicted - simulated| / simulated exceeds this percentage")),
      opt("reference_latency", reference_latency),
      opt("losses", object({
          req("file", path("the expected loss per step as .npy [steps] (e.g. PyTorch's)")),
          opt("rtol", with_default(number(0, inf, "relative tolerance"), 1e-4)),
          opt("atol", with_default(number(0, inf, "absolute tolerance"), 1e-6)),
      }, "training: the loss of every step against expected values")),
  }, "checks that turn into pass/fail (exit 1 on failure)"), json::object());

  auto trace = object({
      opt("file", with_default(string("trace file name inside the output directory"), "trace.pftrace")),
      opt("detail", with_default(enumeration({"none", "summary", "kernel", "instruction", "pe"},
                                             "how much to record: none writes no trace; summary (the wafer's default) keeps per-rectangle phases, streams and counters"),
                                 "kernel")),
      opt("format", with_default(enumeration({"perfetto", "json"}, "Perfetto protobuf or Chrome JSON"), "perfetto")),
      opt("sample", with_default(integer(1, 1e9, "keep 1 in N instruction slices per track (counters and flows stay exact)"), 1)),
      opt("max_bytes", with_default(quantity(UnitKind::bytes, 4096, 1e12, "byte budget: past it slices are dropped with a warning, so the trace stays openable"), "256MiB")),
      opt("pes", object({
          req("x", integer(0, 1e6, "the region's west column (fabric coordinates)")),
          req("y", integer(0, 1e6, "its north row")),
          opt("width", with_default(integer(1, 1e6, "columns"), 1)),
          opt("height", with_default(integer(1, 1e6, "rows"), 1)),
      }, "wafer, detail kernel, instruction or pe: record the PEs of this region (each rectangle's part of it) instead of the default sample "
         "(a rectangle's corners and centre; at detail pe its first 64 PEs); a region holding no PE with a program is an error")),
  }, "trace output");

  auto outputs = with_default(object({
      opt("dir", with_default(string("directory for output .npy files, inside the output directory"), "outputs")),
      opt("save", with_default(boolean("write the model outputs as .npy"), true)),
      opt("heatmap", with_default(boolean("wafer runs: write heatmap.svg, per PE busy fraction, SRAM use and link load"), true)),
  }, "what to write"), json::object());

  auto closure = object({
      req("kind", enumeration({"log", "dump", "assert"},
                              "log: print tensors; dump: write them as .npy under steps/<step>/; assert: stop the run (exit 1) when the condition is false")),
      opt("tensors", array_of(string("a graph output, or \"step\""), "log, dump: the tensors (graph outputs, fetched from the machine)")),
      opt("condition", string("assert: [max|min|mean|sum|absmax(]TENSOR[)] OP NUMBER, or finite(TENSOR); e.g. \"max(y) < 2.0\"")),
      opt("on", with_default(enumeration({"activation", "checkpoint"}, "run on activation steps, or on checkpoint steps (a checkpoint closure)"), "activation")),
      opt("name", string("label in the report and on the console")),
  }, "a step closure: runs at the end of a step with the step's output values (docs/session.md)");

  auto training = object({
      opt("loss", with_default(enumeration({"mse", "softmax_cross_entropy"}, "the loss: mean squared error, or softmax cross-entropy against one-hot targets (batch mean)"), "mse")),
      opt("output", string("the graph output the loss is taken of (default: the only one)")),
      opt("target", with_default(string("the name of the target input (give its values under /inputs)"), "target")),
      opt("optimizer", with_default(object({
          opt("kind", with_default(enumeration({"sgd", "momentum", "adam"}, "SGD, SGD with momentum, Adam (as torch.optim)"), "sgd")),
          opt("learning_rate", with_default(number(0, 1e6, "learning rate"), 0.01)),
          opt("momentum", with_default(number(0, 1, "momentum (kind momentum)"), 0.9)),
          opt("beta1", with_default(number(0, 1, "Adam beta1"), 0.9)),
          opt("beta2", with_default(number(0, 1, "Adam beta2"), 0.999)),
          opt("eps", with_default(number(0, 1, "Adam epsilon"), 1e-8)),
          opt("weight_decay", with_default(number(0, 1e6, "L2 weight decay added to the gradient"), 0.0)),
          opt("schedule", with_default(object({
              opt("kind", with_default(enumeration({"constant", "exponential", "step", "warmup"},
                  "learning rate as a function of the step t (1-based): constant; exponential lr*gamma^(t-1); step lr*gamma^floor((t-1)/step_size); warmup lr*min(1, t/warmup_steps)"), "constant")),
              opt("gamma", with_default(number(0, 1e6, "decay factor (exponential, step)"), 1.0)),
              opt("step_size", with_default(integer(1, 1e9, "steps per decay (step)"), 1)),
              opt("warmup_steps", with_default(integer(1, 1e9, "steps of linear warmup (warmup)"), 1)),
          }, "learning-rate schedule, computed in the graph from the step tensor"), json::object())),
      }, "the optimizer"), json::object())),
      opt("loss_scaling", object({
          opt("init_scale", with_default(number(1e-30, 1e30, "the first loss scale"), 65536.0)),
          opt("growth", with_default(number(1, 1e6, "scale factor after `interval` finite steps in a row"), 2.0)),
          opt("backoff", with_default(number(0, 1, "scale factor after a step with non-finite gradients (the step is skipped)"), 0.5)),
          opt("interval", with_default(integer(1, 1e9, "finite steps in a row before the scale grows"), 2000)),
      }, "dynamic loss scaling for mixed precision (precision.compute fp16 or bf16), GradScaler's rules")),
  }, "train the model: every step runs forward, backward and the optimizer update; weights and optimizer state carry over; precision.compute fp16/bf16 trains in mixed precision on fp32 master weights (docs/training.md)");
  auto sweep_grid = map_of(array_of(any("a value, as --set takes it: a number, a string (a quantity such as \"300GB/s\"), true/false, a list"),
                                     "the values of one field"),
                            "fields to sweep by --set key path, each with its values: `tessera sweep` runs the cartesian product (--grid adds or replaces keys)");
  sweep_grid->dotted_keys = true;
  auto sweep_point = map_of(any("a value, as --set takes it"), "one point: fields by --set key path and their values (every point gives the same fields)");
  sweep_point->dotted_keys = true;
  auto sweep = object({opt("grid", sweep_grid),
                       opt("points", array_of(sweep_point, "a listed set of points, run each with every combination of the grid (fields that go together, such as two shapes)"))},
                      "a parameter sweep of this scenario for `tessera sweep` (docs/sweep.md); `tessera run` ignores it");

  auto root = object({
      opt("$schema", string("the JSON Schema this file follows, for editors (docs/scenario.schema.json, written by `tessera schema --format json-schema`); tessera ignores it")),
      req("schema", enumeration({kScenarioSchema}, "the scenario format version")),
      opt("name", name_node("scenario name; the default output directory is out/<name>/ (default: the file name)")),
      opt("description", with_default(string("free text"), "")),
      req("target", target),
      opt("model", model),
      opt("inputs", with_default(map_of(input, "model inputs by name"), json::object())),
      opt("precision", precision),
      opt("mapping", mapping),
      opt("run", run),
      opt("step_closures", with_default(array_of(closure, "callbacks at step ends"), json::array())),
      opt("training", training),
      opt("expect", expect),
      opt("trace", trace),
      opt("outputs", outputs),
      opt("sweep", sweep),
  }, "a tessera scenario");
  return root;
}

}  // namespace

const Node& scenario_schema() {
  static const NodePtr root = build();
  return *root;
}

}  // namespace tessera::sim
