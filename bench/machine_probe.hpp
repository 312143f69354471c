// How fast each core of this machine is right now, for the accuracy reports (docs/accuracy.md,
// run 8). On the shared 2-core VM the reports run on, a core's throughput drops by up to 2x in
// phases of 50-900 ms, each core on its own, while a latency-bound loop on the same core keeps
// its speed: another tenant shares the physical core. A step measured in another phase than
// its profile says little about the cost model, so the reports run this probe on every core
// before and after each step and give their figures over the steps that every probe found at
// its core's usual speed beside those over all steps.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace machine {

// A fixed piece of throughput-bound work in the L1 cache (ten products of 64 x 64 floats,
// about 1.5 ms here): it slows when the core's execution units are shared, as a model's
// kernels do, and does not allocate, fault or synchronise.
inline double probe_ms() {
  constexpr int n = 64;
  static thread_local std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n, 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 10; ++rep) {
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < n; ++k) {
        const float x = a[static_cast<std::size_t>(i * n + k)];
        for (int j = 0; j < n; ++j) c[static_cast<std::size_t>(i * n + j)] += x * b[static_cast<std::size_t>(k * n + j)];
      }
    }
  }
  asm volatile("" : : "r"(c.data()) : "memory");  // the products are used
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The same length of work bound by latency (a chain of dependent additions): a tenant sharing
// the core's units leaves it at its speed, so the two side by side tell a shared core from a
// slower clock.
inline double latency_probe_ms() {
  const auto t0 = std::chrono::steady_clock::now();
  volatile double acc = 0.0;
  for (int i = 0; i < 300000; ++i) acc = acc * 1.0000001 + 1.0;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The cores this process may run on.
inline std::vector<int> usable_cores() {
  std::vector<int> cores;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cores.push_back(c);
    }
  }
#endif
  if (cores.empty()) {
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()); ++c) cores.push_back(static_cast<int>(c));
  }
  return cores;
}

// One thread pinned to each usable core; run() probes all of them at once (as a step with a
// rank per core loads them) and returns each core's time. Every run is kept, so that a probe
// can be judged against its core's usual speed: the median of the run so far. Against the
// fastest instead, a machine that is slow most of the time would leave almost no step to
// keep, and its profile (medians too) is taken at the usual speed.
class CoreProbes {
 public:
  CoreProbes() : cores_(usable_cores()), ms_(cores_.size(), 0.0), history_(cores_.size()) {
    for (std::size_t k = 0; k < cores_.size(); ++k) threads_.emplace_back([this, k] { serve(k); });
  }
  CoreProbes(const CoreProbes&) = delete;
  CoreProbes& operator=(const CoreProbes&) = delete;
  ~CoreProbes() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  [[nodiscard]] const std::vector<int>& cores() const { return cores_; }

  // Each core's throughput probe, run at once, kept in its history.
  std::vector<double> run() {
    std::vector<double> ms = run(probe_ms);
    for (std::size_t k = 0; k < ms.size(); ++k) history_[k].push_back(ms[k]);
    return ms;
  }

  // `work` on every core at once, each core's time (not kept).
  std::vector<double> run(double (*work)()) {
    std::unique_lock<std::mutex> lock(mutex_);
    work_ = work;
    ++generation_;
    pending_ = cores_.size();
    wake_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0; });
    return ms_;
  }

  // Each core's median and fastest throughput probe so far (0 before the first run).
  [[nodiscard]] std::vector<double> usual() const { return each([](std::vector<double> h) { return middle(h); }); }
  [[nodiscard]] std::vector<double> fastest() const {
    return each([](const std::vector<double>& h) { return *std::min_element(h.begin(), h.end()); });
  }

  // Every throughput probe so far, per core.
  [[nodiscard]] const std::vector<std::vector<double>>& history() const { return history_; }

  // Whether every core's probe in `ms` is within a factor `tolerance` of its usual speed.
  [[nodiscard]] bool steady(const std::vector<double>& ms, double tolerance) const {
    const std::vector<double> u = usual();
    for (std::size_t k = 0; k < ms.size() && k < u.size(); ++k) {
      if (ms[k] > tolerance * u[k] || ms[k] * tolerance < u[k]) return false;
    }
    return true;
  }

  private:
  void serve(std::size_t k) {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cores_[k], &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // unpinned, it still probes some core
#endif
    std::unique_lock<std::mutex> lock(mutex_);
    std::size_t seen = 0;  // the generation at construction: a run() issued before this thread starts is still seen
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      double (*const work)() = work_;
      lock.unlock();
      const double ms = work();
      lock.lock();
      ms_[k] = ms;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  template <class F>
  std::vector<double> each(F f) const {
    std::vector<double> out;
    for (const std::vector<double>& h : history_) out.push_back(h.empty() ? 0.0 : f(h));
    return out;
  }
  static double middle(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }

  std::vector<int> cores_;
  std::vector<double> ms_;
  std::vector<std::vector<double>> history_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  double (*work_)() = probe_ms;
  std::size_t generation_ = 0, pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Runs `step` between two probes of every core; returns, per core, the slower of the two.
template <class Step>
std::vector<double> probe_around(CoreProbes& probes, Step&& step) {
  std::vector<double> around = probes.run();
  step();
  const std::vector<double> after = probes.run();
  for (std::size_t k = 0; k < around.size(); ++k) around[k] = std::max(around[k], after[k]);
  return around;
}

// The steps of `passes` (per pass, ms per step) whose probes (per pass, per step, per core, as
// probe_around returns them) every core found within `tolerance` of its usual speed; passes
// left empty are dropped.
inline std::vector<std::vector<double>> steady_passes(const std::vector<std::vector<double>>& passes,
                                                      const std::vector<std::vector<std::vector<double>>>& around,
                                                      const CoreProbes& probes, double tolerance) {
  std::vector<std::vector<double>> out;
  for (std::size_t pass = 0; pass < passes.size() && pass < around.size(); ++pass) {
    std::vector<double> kept;
    for (std::size_t step = 0; step < passes[pass].size() && step < around[pass].size(); ++step) {
      if (probes.steady(around[pass][step], tolerance)) kept.push_back(passes[pass][step]);
    }
    if (!kept.empty()) out.push_back(std::move(kept));
  }
  return out;
}

// A run of probes of one core taken every `period_ms`, summarised against its fastest.
struct Phases {
  double slow_fraction = 0.0;    // of the probes over `tolerance` x the fastest
  double worst = 1.0;            // the slowest probe over the fastest
  double longest_slow_ms = 0.0;  // the longest run of consecutive slow probes, in ms
};

inline Phases phases_of(const std::vector<double>& probes_ms, double period_ms, double tolerance) {
  Phases p;
  if (probes_ms.empty()) return p;
  const double best = *std::min_element(probes_ms.begin(), probes_ms.end());
  std::size_t slow = 0, run = 0, longest = 0;
  for (const double ms : probes_ms) {
    p.worst = std::max(p.worst, ms / best);
    if (ms > tolerance * best) {
      ++slow;
      longest = std::max(longest, ++run);
    } else {
      run = 0;
    }
  }
  p.slow_fraction = static_cast<double>(slow) / static_cast<double>(probes_ms.size());
  p.longest_slow_ms = static_cast<double>(longest) * period_ms;
  return p;
}

// One line per core: how many throughput probes it ran and how often it was slow.
inline void print_cores(const CoreProbes& probes, double tolerance) {
  for (std::size_t k = 0; k < probes.cores().size(); ++k) {
    const std::vector<double>& h = probes.history()[k];
    const Phases p = phases_of(h, 0.0, tolerance);
    std::printf("core %d: %zu throughput probes, over %.2fx its fastest (%.3f ms) in %.0f%% of them, the slowest %.2fx\n",
                probes.cores()[k], h.size(), tolerance, probes.fastest()[k], 100.0 * p.slow_fraction, p.worst);
  }
}

}  // namespace machine
