// Multi-step runs (sim/session.hpp): the step schedule of cerebras.pytorch's DataExecutor
// (shared/reference/wafer.md "Step closures and executor semantics"), written out per case here
// from the rules -- checkpoints at 0-indexed steps k-1, 2k-1, ... and the last; activation steps
// capped at num_steps and reduced to the gcd with every checkpoint step + 1; a step is an
// activation step when (step + 1) % activation_steps == 0 or it is the last -- and closures.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "sim/session.hpp"

using namespace tessera;
using namespace tessera::sim;
using Catch::Matchers::Contains;

namespace {
std::vector<int64_t> which(const StepSchedule& s, bool checkpoint) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < s.steps; ++i)
    if (checkpoint ? s.is_checkpoint(i) : s.is_activation(i)) v.push_back(i);
  return v;
}
using V = std::vector<int64_t>;
}  // namespace

TEST_CASE("session: step schedules for several steps / checkpoint_steps / activation_steps", "[session]") {
  struct Case {
    int64_t steps, ckpt, act;
    V checkpoints, activations;
    int64_t act_used;
    bool warns;
  };
  const Case cases[] = {
      {10, 0, 1, {}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, false},
      {10, 0, 3, {}, {2, 5, 8, 9}, 3, false},           // every third step and the last
      {10, 4, 2, {3, 7, 9}, {1, 3, 5, 7, 9}, 2, false},  // gcd(2, 4, 8, 10) = 2
      {10, 4, 3, {3, 7, 9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, true},  // gcd(3, 4, 8, 10) = 1
      {6, 3, 3, {2, 5}, {2, 5}, 3, false},
      {5, 0, 8, {}, {4}, 5, true},                       // capped at num_steps
      {1, 1, 1, {0}, {0}, 1, false},
      {12, 5, 5, {4, 9, 11}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 1, true},  // gcd(5, 5, 10, 12) = 1
      {12, 18, 4, {11}, {3, 7, 11}, 4, false},           // k > num_steps: only the last step; gcd(4, 12) = 4
  };
  for (const auto& c : cases) {
    INFO("steps " << c.steps << " checkpoint_steps " << c.ckpt << " activation_steps " << c.act);
    const StepSchedule s = StepSchedule::make(c.steps, c.ckpt, c.act);
    CHECK(which(s, true) == c.checkpoints);
    CHECK(which(s, false) == c.activations);
    CHECK(s.activation_steps == c.act_used);
    CHECK(s.warnings.empty() == !c.warns);
  }
}

TEST_CASE("session: closures run on activation or checkpoint steps, asserts stop naming the step", "[session]") {
  const StepSchedule s = StepSchedule::make(6, 3, 3);
  const auto cl = parse_closures(nlohmann::json::parse(R"js([
      {"kind": "log", "tensors": ["y", "step"], "on": "activation"},
      {"kind": "assert", "condition": "max(y) < 10", "on": "checkpoint"},
      {"kind": "assert", "condition": "finite(y)", "on": "activation"}])js"),
                                 {"y"});
  REQUIRE(cl.size() == 3);
  const std::map<std::string, Tensor> ok{{"y", Tensor::from_f32({2}, {1.0f, 2.0f})}};
  CHECK(run_closures(cl, s, 0, ok, "").empty());  // not an activation or checkpoint step
  const auto r = run_closures(cl, s, 2, ok, "");
  REQUIRE(r.size() == 3);
  CHECK(r[0]["values"]["step"] == 2.0);
  CHECK(r[1]["value"] == 2.0);
  CHECK(r[1]["pass"] == true);
  const std::map<std::string, Tensor> big{{"y", Tensor::from_f32({2}, {1.0f, 20.0f})}};
  CHECK(run_closures(cl, s, 4, big, "").empty());  // step 4: no closure runs
  try {
    run_closures(cl, s, 5, big, "");
    FAIL("the assert should have failed");
  } catch (const CheckFailed& e) {
    CHECK_THAT(e.what(), Catch::Contains("step 5: assert closure 'max(y) < 10' failed (value 20") && Catch::Contains("/step_closures/1"));
  }
}

TEST_CASE("session: closures are checked against the graph outputs with JSON pointers", "[session]") {
  try {
    parse_closures(nlohmann::json::parse(R"js([{"kind": "log", "tensors": ["z"], "on": "activation"},
                                             {"kind": "assert", "condition": "maxx(y) < 2", "on": "activation"},
                                             {"kind": "assert", "on": "activation"}])js"),
                   {"y"});
    FAIL("should throw");
  } catch (const InputError& e) {
    REQUIRE(e.diagnostics().size() == 3);
    CHECK(e.diagnostics()[0].where == "/step_closures/0/tensors/0");
    CHECK(e.diagnostics()[1].where == "/step_closures/1/condition");
    CHECK_THAT(e.diagnostics()[1].message, Catch::Contains("unknown reduction 'maxx'"));
    CHECK(e.diagnostics()[2].where == "/step_closures/2");
  }
}

// The C++ API (sim::Session): closures in C++ receive the step and the machine's values, on the
// scenario's activation (or checkpoint) steps; here on the NeuronCore training run (SystemC: one
// elaboration in this test's process), compared with the report the run writes.
TEST_CASE("session: C++ step closures see the machine's loss on activation and checkpoint steps", "[session]") {
  const std::string out = (std::filesystem::temp_directory_path() / ("tessera_session_api_" + std::to_string(::getpid()))).string();
  Session s(std::string(TESSERA_SOURCE_DIR) + "/scenarios/neuroncore/train/train_mlp_sgd.json", RunOptions{out, false, ""}, {"trace.detail=kernel"});
  std::vector<std::pair<int64_t, double>> act, ckpt;
  s.add_step_closure("losses", {"loss", "step"}, [&](int64_t step, const std::map<std::string, Tensor>& t) {
    CHECK(t.at("step").to_f32()[0] == static_cast<float>(step));
    act.push_back({step, t.at("loss").cast(DType::f64).to_f64()[0]});
  });
  s.add_step_closure("at checkpoints", {"loss"}, [&](int64_t step, const std::map<std::string, Tensor>& t) { ckpt.push_back({step, t.at("loss").to_f32()[0]}); }, true);
  REQUIRE(s.run() == 0);
  // activation_steps 5, checkpoint_steps 10 of 25 steps: activations 4, 9, 14, 19, 24; checkpoints 9, 19, 24.
  REQUIRE(act.size() == 5);
  REQUIRE(ckpt.size() == 3);
  CHECK(ckpt[0].first == 9);
  CHECK(ckpt[2].first == 24);
  const nlohmann::json r = nlohmann::json::parse(read_file(out + "/report.json"));
  for (size_t i = 0; i < act.size(); ++i) {
    CHECK(act[i].first == static_cast<int64_t>(5 * i + 4));
    CHECK(act[i].second == r["steps"][static_cast<size_t>(act[i].first)]["loss"].get<double>());
  }
  std::filesystem::remove_all(out);
}

TEST_CASE("session: a C++ step closure naming a tensor the graph does not have is refused before the run", "[session]") {
  Session s(std::string(TESSERA_SOURCE_DIR) + "/scenarios/reference/train_mlp_sgd.json", RunOptions{"/tmp/tessera_never_written", false, ""});
  s.add_step_closure("typo", {"los"}, [](int64_t, const std::map<std::string, Tensor>&) {});
  CHECK_THROWS_WITH(s.run(), Contains("C++ step closure 'typo'") && Contains("did you mean 'loss'"));
  CHECK_FALSE(std::filesystem::exists("/tmp/tessera_never_written/report.json"));
}
