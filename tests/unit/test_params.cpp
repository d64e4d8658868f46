#include <catch2/catch.hpp>

#include "isa/params.hpp"

using namespace tessera;

namespace {
ParamSet resolve(const std::string& preset, std::vector<ParamOverride> ov, DiagnosticList& d) {
  const TargetDesc* t = target_of_preset(preset);
  REQUIRE(t);
  return ParamSet::resolve(*t, *t->find_preset(preset), ov, d);
}
}  // namespace

TEST_CASE("params: every declaration is complete and its default is in range", "[params]") {
  for (const auto* t : all_targets()) {
    for (const auto& d : t->decls) {
      INFO(t->kind << " " << d.name);
      CHECK(!d.description.empty());
      CHECK(!d.source.empty());
      if (d.type == ParamType::int_list) {
        for (auto v : d.default_value.list) CHECK((v >= d.min && v <= d.max));
      } else {
        CHECK(d.default_value.number >= d.min);
        CHECK(d.default_value.number <= d.max);
      }
    }
    for (const auto& p : t->presets)
      for (const auto& v : p.values) {
        INFO(p.name << " " << v.name);
        const ParamDecl* d = t->find(v.name);
        REQUIRE(d);
        CHECK(!v.source.empty());
        if (d->type != ParamType::int_list) CHECK((v.value.number >= d->min && v.value.number <= d->max));
      }
  }
}

TEST_CASE("params: presets carry the fact-sheet values", "[params]") {
  DiagnosticList d;
  auto trn1 = resolve("trn1", {}, d);
  auto trn2 = resolve("trn2", {}, d);
  auto wse2 = resolve("wse2", {}, d);
  auto wse3 = resolve("wse3", {}, d);
  REQUIRE(d.empty());
  CHECK(trn1.num("tensor.clock") == Approx(2.8e9));
  CHECK(trn1.num("vector.clock") == Approx(1.12e9));
  CHECK(trn1.num("sbuf.partition_bytes") == 192 * 1024);
  CHECK(trn2.num("tensor.clock") == Approx(2.4e9));
  CHECK(trn2.num("sbuf.partition_bytes") == 224 * 1024);
  CHECK_FALSE(trn2.flag("core.port_conflicts"));
  CHECK(wse2.integer("fabric.width") == 750);
  CHECK(wse2.integer("fabric.height") == 994);
  CHECK(wse2.num("pe.sram_bytes") == 49152);
  CHECK(wse2.integer("simd.fp16") == 4);
  CHECK(wse3.integer("simd.fp16") == 8);
  CHECK(wse3.list("queue.input_depth") == std::vector<int64_t>{8, 8, 4, 4, 4, 4, 4, 4});
}

TEST_CASE("params: overrides parse units, and bad ones are all reported", "[params]") {
  DiagnosticList d;
  auto s = resolve("trn1", {{"hbm.bandwidth", "300GB/s", "/target/params/hbm.bandwidth"}}, d);
  REQUIRE(d.empty());
  CHECK(s.num("hbm.bandwidth") == Approx(300e9));

  DiagnosticList bad;
  resolve("trn1",
          {{"hbm.bandwith", "300GB/s", "/a"}, {"tensor.clock", "48KiB", "/b"}, {"tensor.rows", "0", "/c"},
           {"core.port_conflicts", "maybe", "/d"}},
          bad);
  REQUIRE(bad.size() == 4);
  CHECK(bad.items()[0].hint.find("hbm.bandwidth") != std::string::npos);
  CHECK(bad.items()[1].message.find("size") != std::string::npos);
  CHECK(bad.items()[2].message.find("range") != std::string::npos);
  CHECK(bad.items()[3].where == "/d");
}
