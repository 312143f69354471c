#!/usr/bin/env bash
# Builds and runs a tiny program that uses ppsched the way a downstream project would:
#   subproject  - as a Meson subproject, through dependency('ppsched'), and in compiled mode through
#                 dependency('ppsched-compiled')
#   pkgconfig   - installed by `meson install`, found by pkg-config (also in compiled mode)
#   cmake       - installed by `meson install`, found by CMake's find_package(ppsched)
#                 (ppsched::ppsched, and ppsched::compiled for compiled mode)
# Usage: run.sh KIND SOURCE_ROOT WORK_DIR
set -euo pipefail
kind=$1 src=$2 work=$3
here=$src/tests/consumers
rm -rf "$work" && mkdir -p "$work"

install_ppsched() {
  meson setup "$work/lib" "$src" --prefix "$work/prefix" \
    -Dtests=false -Dbench=false -Dexamples=false -Dcuda=disabled >"$work/setup.log"
  meson install -C "$work/lib" >"$work/install.log"
}

case "$kind" in
  subproject)
    cp -r "$here/app" "$work/app"
    mkdir -p "$work/app/subprojects"
    ln -s "$src" "$work/app/subprojects/ppsched"
    meson setup "$work/app/build" "$work/app" >"$work/setup.log"
    ninja -C "$work/app/build" >"$work/build.log"
    "$work/app/build/consumer"
    "$work/app/build/consumer_compiled"
    ;;
  pkgconfig)
    install_ppsched
    export PKG_CONFIG_PATH="$work/prefix/share/pkgconfig"
    flags=$(pkg-config --cflags --libs ppsched)
    echo "pkg-config --cflags --libs ppsched: $flags"
    # shellcheck disable=SC2086
    ${CXX:-c++} "$here/app/consumer.cpp" $flags -o "$work/consumer"
    "$work/consumer"
    # Compiled mode from the installed headers: one file of the program compiles the library.
    printf '#include <ppsched/compiled.hpp>\n' >"$work/ppsched_compiled.cpp"
    # shellcheck disable=SC2086
    ${CXX:-c++} -DPPSCHED_COMPILED "$here/app/consumer_compiled.cpp" "$work/ppsched_compiled.cpp" $flags \
      -o "$work/consumer_compiled"
    "$work/consumer_compiled"
    ;;
  cmake)
    command -v cmake >/dev/null || { echo "SKIP: cmake is not installed"; exit 77; }
    install_ppsched
    cmake -S "$here/cmake" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCONSUMER_SOURCE="$here/app/consumer.cpp" \
      -DCONSUMER_COMPILED_SOURCE="$here/app/consumer_compiled.cpp" >"$work/cmake.log"
    cmake --build "$work/cmake-build" >"$work/cmake-build.log"
    "$work/cmake-build/consumer"
    "$work/cmake-build/consumer_compiled"
    ;;
  *)
    echo "unknown consumer kind '$kind' (expected subproject, pkgconfig or cmake)" >&2
    exit 2
    ;;
esac
