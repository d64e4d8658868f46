// The `tessera` executable: a thin shell over tessera::sim::cli_main.
#include "models/common/systemc_env.hpp"
#include "sim/cli.hpp"

int main(int argc, char** argv) {
  tessera::models::quiet_systemc_banner();
  return tessera::sim::cli_main(argc, argv);
}
