#!/usr/bin/env bash
# The two commands of the README's quickstart:
#   ./bootstrap.sh run [ARGS...]  install what is missing, build, run the planner (main job)
#   ./bootstrap.sh test           install what is missing, build everything, run every test
# Environment: PPSCHED_BUILD (build folder, default ./build).
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

configure() {
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dwerror=true
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
  *)
    echo "usage: ./bootstrap.sh run [ppsched-plan arguments...] | ./bootstrap.sh test" >&2
    exit 2
    ;;
esac
