#!/usr/bin/env bash
# The two commands of the README's quickstart:
#   ./bootstrap.sh run [ARGS...]  install what is missing, build, run the planner (main job)
#   ./bootstrap.sh test           install what is missing, build the library, its tests and
#                                 examples, run the suite (Catch2, MPI, the CLI, the docs' code)
#   ./bootstrap.sh check          turn the hygiene checks and the benchmarks on in that build,
#                                 compile them, run suite 'check' (every header alone, clang's
#                                 warnings, the package consumers, compiled-mode twins, ODR)
#   ./bootstrap.sh cuda           turn the CUDA targets on in that build, compile them with nvcc,
#                                 run the CUDA tests (each SKIPPED, with the reason, without a GPU)
# Environment: PPSCHED_BUILD (build folder, default ./build); PPSCHED_CUDA (enabled, disabled or
# auto: whether a new build folder has the CUDA targets; default auto with a GPU, else disabled).
set -euo pipefail
cd "$(dirname "$0")"
build=${PPSCHED_BUILD:-build}
packages=(meson ninja-build g++ clang pkg-config python3 catch2 libbenchmark-dev nlohmann-json3-dev cmake libopenmpi-dev openmpi-bin)

install_missing() {
  local missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "bootstrap: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: these Debian packages are missing: ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The CUDA targets are built where they can run. Without a GPU their tests only say SKIPPED,
# and compiling them (six nvcc units) was about 900 CPU-s, most of the 10 minutes the test
# command may take on two cores (docs/performance.md, "Build time"); `./bootstrap.sh cuda`
# compiles them on demand, and CI always does.
cuda_choice() {
  if [ -n "${PPSCHED_CUDA:-}" ]; then
    echo "$PPSCHED_CUDA"
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo auto
  else
    echo disabled
  fi
}

# A new build folder leaves out the hygiene checks and the benchmarks: they compile the
# headers again and again (every header alone, a second compiler, three consumer builds, the
# header-only twins) and took more than a third of the test command's 18 minutes on two cores
# (docs/performance.md, "Build time"). `./bootstrap.sh check` turns them on; CI runs both.
configure() {
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dwerror=true -Dcuda="$(cuda_choice)" -Dchecks=false -Dbench=false
  fi
}

case "${1:-}" in
  run)
    shift
    install_missing
    configure
    if ninja -C "$build" -t targets all 2>/dev/null | grep -q '^examples/ppsched-plan:'; then
      ninja -C "$build" examples/ppsched-plan >/dev/null
      exec "$build/examples/ppsched-plan" "$@"
    fi
    ninja -C "$build" examples/quickstart >/dev/null
    exec "$build/examples/quickstart" "$@"
    ;;
  test)
    install_missing
    configure
    meson compile -C "$build"
    status=0
    meson test -C "$build" --print-errorlogs --num-processes "$(nproc)" || status=$?
    python3 .ci/count_tests.py "$build/meson-logs/testlog.json" || true
    exit "$status"
    ;;
  check)
    install_missing
    configure
    meson configure "$build" -Dchecks=true -Dbench=true
    meson compile -C "$build"
    status=0
    meson test -C "$build" --suite check --print-errorlogs --num-processes "$(nproc)" --logbase checklog || status=$?
    python3 .ci/count_tests.py "$build/meson-logs/checklog.json" || true
    exit "$status"
    ;;
  cuda)
    install_missing
    configure
    command -v nvcc >/dev/null || { echo "bootstrap: cuda needs nvcc (the CUDA toolkit) on PATH" >&2; exit 1; }
    meson configure "$build" -Dcuda=enabled
    meson compile -C "$build"
    status=0
    meson test -C "$build" --suite cuda --print-errorlogs --num-processes "$(nproc)" --logbase cudalog || status=$?
    python3 .ci/count_tests.py "$build/meson-logs/cudalog.json" || true
    exit "$status"
    ;;
  *)
    echo "usage: ./bootstrap.sh run [ppsched-plan arguments...] | ./bootstrap.sh test | ./bootstrap.sh check | ./bootstrap.sh cuda" >&2
    exit 2
    ;;
esac
