#!/usr/bin/env bash
# consumer.sh BUILD SRC WORK: installs BUILD into WORK/prefix (cmake --install), builds the
# out-of-tree project tests/install/consumer against it with find_package(tessera), runs the
# quickstart scenario through sim::Session with it, and checks the pkg-config file resolves.
set -euo pipefail
build=$1; src=$2; work=$3
rm -rf "$work"; mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/tests/install/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" >"$work/configure.log"
cmake --build "$work/build" >"$work/build.log"
"$work/build/consumer" "$src/scenarios/quickstart.json" "$work/out"
[ -f "$work/out/report.json" ] || { echo "FAIL: no report.json"; exit 1; }
[ -x "$work/prefix/bin/tessera" ] || { echo "FAIL: the tessera command is not installed"; exit 1; }
py=$(PYTHONPATH="$work/prefix/lib/tessera/python" /usr/bin/python3 -c 'import tessera; print(tessera.__version__)') ||
  { echo "FAIL: the installed Python package does not import"; exit 1; }
echo "installed python package: tessera $py"
pc=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --print-errors --cflags --libs tessera)
echo "pkg-config: $pc"
grep -q -- "-I$work/prefix/lib/pkgconfig/../../include/tessera" <<<"$pc" || { echo "FAIL: pkg-config does not point into the prefix"; exit 1; }
# The same program built with the pkg-config flags alone (and an sc_main of its own).
printf 'extern "C" int sc_main(int, char**) { return 3; }\n' >"$work/sc_main.cpp"
cxx=(c++)
command -v ccache >/dev/null && cxx=(ccache c++)
# shellcheck disable=SC2086
"${cxx[@]}" -std=c++20 -O1 -o "$work/consumer_pc" "$src/tests/install/consumer/main.cpp" "$work/sc_main.cpp" $pc
"$work/consumer_pc" "$src/scenarios/quickstart.json" "$work/out_pc" | tail -1
# The same report but for the output directory.
cmp -s <(sed -e "s|$work/out_pc|OUT|g" "$work/out_pc/report.json") <(sed -e "s|$work/out|OUT|g" "$work/out/report.json") ||
  { echo "FAIL: the two consumers' reports differ"; exit 1; }
echo "install consumer: PASS"
