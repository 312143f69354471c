// Whether this machine can time a pipeline step to a few percent (docs/accuracy.md, run 8): for
// `seconds`, every core at once runs the throughput-bound probe and then the latency-bound one
// (machine_probe.hpp), and each core's probes are printed every tenth of a second as ratios to
// that core's fastest, then summarised. A throughput probe that
// swings while the latency probe holds is a core shared with another tenant; both swinging is
// a clock that changes. Not a test: a report.
//
//   machine_noise [seconds] [tolerance]      defaults: 3 s, 1.15
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "machine_probe.hpp"

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  const double tolerance = argc > 2 ? std::atof(argv[2]) : 1.15;
  if (!(seconds > 0.0) || !(tolerance > 1.0)) {
    std::fprintf(stderr, "machine_noise: seconds must be above 0 and tolerance above 1 (got %s, %s)\n",
                 argc > 1 ? argv[1] : "3", argc > 2 ? argv[2] : "1.15");
    return 2;
  }
  machine::CoreProbes probes;
  const std::size_t n = probes.cores().size();
  std::vector<std::vector<double>> throughput(n), latency(n);
  std::vector<double> when;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  while (elapsed() < seconds) {
    when.push_back(1000.0 * elapsed());
    const std::vector<double> t = probes.run();
    const std::vector<double> l = probes.run(machine::latency_probe_ms);
    for (std::size_t k = 0; k < n; ++k) {
      throughput[k].push_back(t[k]);
      latency[k].push_back(l[k]);
    }
  }
  const double period = when.size() > 1 ? (when.back() - when.front()) / static_cast<double>(when.size() - 1) : 0.0;
  std::printf("%zu cores, %zu probes each, one every %.2f ms; per core: throughput probe / latency probe, each over that core's fastest\n",
              n, when.size(), period);
  std::vector<double> fastest_t(n), fastest_l(n);
  for (std::size_t k = 0; k < n; ++k) {
    fastest_t[k] = *std::min_element(throughput[k].begin(), throughput[k].end());
    fastest_l[k] = *std::min_element(latency[k].begin(), latency[k].end());
  }
  double next = 0.0;
  for (std::size_t i = 0; i < when.size(); ++i) {
    if (when[i] < next) continue;
    next = when[i] + 100.0;
    std::printf("%7.0f ms", when[i]);
    for (std::size_t k = 0; k < n; ++k) {
      std::printf("   core %d %.2fx / %.2fx", probes.cores()[k], throughput[k][i] / fastest_t[k], latency[k][i] / fastest_l[k]);
    }
    std::printf("\n");
  }
  for (std::size_t k = 0; k < n; ++k) {
    const machine::Phases t = machine::phases_of(throughput[k], period, tolerance);
    const machine::Phases l = machine::phases_of(latency[k], period, tolerance);
    std::printf("core %d: throughput probe (fastest %.3f ms) over %.2fx in %.0f%% of probes, worst %.2fx, longest slow run %.0f ms; "
                "latency probe (fastest %.3f ms) over %.2fx in %.0f%%, worst %.2fx\n",
                probes.cores()[k], fastest_t[k], tolerance, 100.0 * t.slow_fraction, t.worst, t.longest_slow_ms, fastest_l[k],
                tolerance, 100.0 * l.slow_fraction, l.worst);
  }
  return 0;
}
