#include <catch2/catch.hpp>

#include "isa/units.hpp"

using namespace tessera;

TEST_CASE("units: quantities parse to SI base units", "[units]") {
  CHECK(*parse_quantity("850MHz", UnitKind::frequency).value == Approx(850e6));
  CHECK(*parse_quantity("1.4GHz", UnitKind::frequency).value == Approx(1.4e9));
  CHECK(*parse_quantity("820GB/s", UnitKind::bandwidth).value == Approx(820e9));
  CHECK(*parse_quantity("1.2Tb/s", UnitKind::bandwidth).value == Approx(150e9));
  CHECK(*parse_quantity("48KiB", UnitKind::bytes).value == 49152.0);
  CHECK(*parse_quantity("1.3us", UnitKind::time).value == Approx(1.3e-6));
  CHECK(*parse_quantity("0.943ms", UnitKind::time).value == Approx(0.943e-3));
  CHECK(*parse_quantity(" 17 B/ns ", UnitKind::bandwidth).value == Approx(17e9));
  CHECK(*parse_quantity("128", UnitKind::count).value == 128.0);
  CHECK(*parse_quantity("2.5", UnitKind::frequency).value == 2.5);  // plain number: base unit
}

TEST_CASE("units: a unit of the wrong kind or an unknown unit is an error", "[units]") {
  auto q = parse_quantity("48KiB", UnitKind::frequency);
  CHECK_FALSE(q.value);
  CHECK(q.error.find("size") != std::string::npos);
  CHECK(q.error.find("frequency") != std::string::npos);
  CHECK_FALSE(parse_quantity("3 furlongs", UnitKind::time).value);
  CHECK_FALSE(parse_quantity("fast", UnitKind::time).value);
  CHECK_FALSE(parse_quantity("", UnitKind::time).value);
  CHECK_FALSE(parse_quantity("inf GHz", UnitKind::frequency).value);
}

TEST_CASE("units: formatting picks a readable prefix", "[units]") {
  CHECK(format_quantity(2.8e9, UnitKind::frequency) == "2.8 GHz");
  CHECK(format_quantity(196608, UnitKind::bytes) == "192 KiB");
  CHECK(format_quantity(16.0 * 1073741824.0, UnitKind::bytes) == "16 GiB");
  CHECK(format_quantity(1e13, UnitKind::bytes) == "10 TB");  // not 9.766e+09 KiB
  CHECK(format_quantity(1e15, UnitKind::bytes) == "1000 TB");
  CHECK(format_quantity(410e9, UnitKind::bandwidth) == "410 GB/s");
  CHECK(format_quantity(1.3e-6, UnitKind::time) == "1.3 us");
}
