// Reliability of the CPU runtime (issue #8): the fault-injection matrix and the soak.
//
// The matrix runs every training schedule family on 4 ranks (so the first, a middle and the
// last rank are three different ranks) with the plain C++ MLP of examples/mlp, and injects:
// a throw in F, B, BI or BW on the first, a middle and the last rank at the first, a middle
// and the last micro-batch; a rank whose host stops without sending; a stage that hangs
// past the watchdog (and one that gives up when its step's stop token asks); a slow rank.
// Each case must end (no hang), name the first error with its rank, stage, micro-batch and
// action, leave no thread behind, and the next step after the recovered fault must give the
// same losses and gradients, bit for bit, as the model trained without a pipeline. The
// forward-only schedule gets the throws in F, checked against the unpipelined forward. Leaks are LeakSanitizer's job: .ci/reliability runs this
// executable under ASan, whose leak check fails the run at exit.
//
// The soak runs 10,000 steps on 4 ranks with fast synthetic stages and checks that steady
// state allocates nothing (a replaced global operator new counts every allocation of the
// process), that resident memory does not grow, and that every stage saw every micro-batch
// of every step exactly once in each direction. PPSCHED_SOAK_STEPS overrides the count for
// the (much slower) sanitizer builds.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <limits>
#include <new>
#include <sstream>
#include <string_view>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/runtime/threads.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/costs/cost_model.hpp>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "../examples/mlp/mlp.hpp"
#include "../examples/mlp/mlp_stage.hpp"

// ------------------------------------------------------------------ allocation counting
// Every allocation of the process is counted while `counting` is on (tests/counting_new.hpp;
// no other translation unit of this executable replaces operator new).
#include "counting_new.hpp"

using namespace std::chrono_literals;
using ppsched::Action;
using ppsched::CpuBackend;
using ppsched::CpuCluster;
using ppsched::Op;
using ppsched::Schedule;
using ppsched::StageFunctions;
using ppsched::World;

namespace {

struct Family {
  const char* name;
  int chunks;
};
constexpr Family families[] = {{"gpipe", 1},  {"1f1b", 1},   {"interleaved-1f1b", 2}, {"looped-bfs", 2},
                               {"zb-h1", 1},  {"zb-h2", 1},  {"zb-v", 2},             {"v-half", 2},
                               {"v-min", 2},  {"dualpipev", 2}};

constexpr int ranks = 4;
constexpr int microbatches = 8;

Schedule make(const Family& f, int p, int m) {
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  req.chunks = f.chunks;
  return ppsched::lower(ppsched::make_schedule(f.name, req));
}

// Threads of this process, as the kernel counts them: catches a thread that ppsched's own
// counter would miss (one started by the backend or the standard library behind it).
// A joined thread can still be listed for a moment: join() returns when the thread clears
// its id, before the kernel releases its task. Such a thread already carries PF_EXITING
// (flags, field 9 of its stat), so it is not counted; CI once saw the baseline taken in
// that moment one thread too high.
int os_threads() {
  constexpr unsigned long pf_exiting = 0x4;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // gone between listing and reading
    // The command name is in parentheses and may hold any character; fields follow the last ')'.
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 1));
    std::string state;
    long ppid = 0, pgrp = 0, session = 0, tty = 0, tpgid = 0;
    unsigned long flags = 0;
    if (!(fields >> state >> ppid >> pgrp >> session >> tty >> tpgid >> flags)) continue;
    if ((flags & pf_exiting) == 0) ++n;
  }
  return n;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool under_sanitizer = true;
#else
constexpr bool under_sanitizer = false;
#endif

// The thread count before a test starts any: a thread is started and joined first, so that
// a runtime that starts a helper thread of its own on the first std::thread (TSan does)
// has done so before the count is taken.
int baseline_threads() {
  std::thread([] {}).join();
  return os_threads();
}

// Resident pages of this process (the second field of /proc/self/statm).
long resident_pages() {
  std::ifstream statm("/proc/self/statm");
  long size = 0;
  long resident = 0;
  statm >> size >> resident;
  return resident;
}

std::vector<CpuBackend*> backends(CpuCluster& c) {
  std::vector<CpuBackend*> out;
  for (int r = 0; r < c.ranks(); ++r) out.push_back(&c.rank(r));
  return out;
}

std::vector<float> data(std::size_t n, std::uint32_t seed, float scale) {
  mlp::Random random(seed);
  std::vector<float> out(n);
  for (float& x : out) x = scale * random.next();
  return out;
}

// What a case injects into the stage callables. The callables read it on the backend's
// worker threads; the test thread writes it only between steps (World::run_step returns
// after every rank has stopped), so the step's start orders those writes before the reads.
struct Injection {
  enum class Kind : std::uint8_t { none, throw_at, hang_at, hang_until_stopped, slow_rank };
  // Atomic: the failed step's queued callables may still run when the test disarms it
  // (the reported problem with work left behind a failed step).
  std::atomic<Kind> kind{Kind::none};
  Op op = Op::F;
  std::int32_t stage = -1;
  std::int32_t microbatch = -1;
  std::vector<bool> slow_stage;              // slow_rank: the stages on the slow rank
  // hang_at: how long the stage hangs; hang_until_stopped: the longest it waits for the stop;
  // slow_rank: per action.
  std::chrono::milliseconds duration{0};
  // After the wrapped callable returned: records that the hung action is over.
  void after(Op o, std::int32_t s, std::int32_t mb) const {
    if ((kind != Kind::hang_at && kind != Kind::hang_until_stopped) || o != op || s != stage || mb != microbatch) {
      return;
    }
    const std::lock_guard<std::mutex> lock(hang_mutex);
    hang_over = true;
  }

  mutable std::mutex hang_mutex;
  mutable bool hang_over = false;
  mutable std::atomic<bool> saw_stop{false};  // hang_until_stopped: the step's stop token ended the hang

  // Whether the hung callable has returned (read after the step that hung has thrown).
  [[nodiscard]] bool hang_has_ended() const {
    const std::lock_guard<std::mutex> lock(hang_mutex);
    return hang_over;
  }
  void rearm() {
    const std::lock_guard<std::mutex> lock(hang_mutex);
    hang_over = false;
    saw_stop = false;
  }

  void before(Op o, std::int32_t s, std::int32_t mb) const {
    switch (kind) {
      case Kind::none:
        return;
      case Kind::throw_at:
        if (o == op && s == stage && mb == microbatch) throw std::runtime_error("injected fault");
        return;
      case Kind::hang_at:
        // A device that stops answering, modelled as a timed wait well past the watchdog.
        if (o == op && s == stage && mb == microbatch) std::this_thread::sleep_for(duration);
        return;
      case Kind::hang_until_stopped:
        // A long callable that cooperates: it polls its step's stop token (here: sleeps on it).
        if (o == op && s == stage && mb == microbatch) {
          std::mutex m;
          std::condition_variable_any cv;
          std::unique_lock<std::mutex> lock(m);
          (void)cv.wait_for(lock, ppsched::step_stop_token(), duration, [] { return false; });
          saw_stop = ppsched::step_stop_token().stop_requested();
        }
        return;
      case Kind::slow_rank:
        // A slower device: a timed wait, not a synchronisation.
        if (slow_stage[static_cast<std::size_t>(s)]) std::this_thread::sleep_for(duration);
        return;
    }
  }
};

// The MLP trained through a World and the same MLP trained without a pipeline, side by side.
// Gradients are applied only after a step succeeds (a failed step is discarded, as a
// training loop would skip it), so the two models stay equal through every fault.
class TwinTraining {
 public:
  TwinTraining(const Schedule& schedule, CpuCluster& cluster, const Injection& injection,
               ppsched::ExecutorOptions options = {})
      : schedule_(schedule), stages_(schedule.stages()) {
    layers_ = static_cast<std::size_t>(std::max(4, stages_) + 1);
    widths_.push_back(3);
    for (std::size_t l = 1; l < layers_; ++l) widths_.push_back(4 + l % 3);
    widths_.push_back(2);
    pipelined_ = std::make_unique<mlp::Mlp>(widths_, 7);
    reference_ = std::make_unique<mlp::Mlp>(widths_, 7);
    gradients_.resize(static_cast<std::size_t>(stages_));
    std::vector<StageFunctions> functions;
    for (int s = 0; s < stages_; ++s) {
      const std::size_t first = layers_ * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages_);
      const std::size_t last = layers_ * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages_);
      adapters_.push_back(std::make_unique<mlp::MlpStage>(*pipelined_, first, last, rows_, schedule.microbatches));
      StageFunctions f = adapters_.back()->functions(s + 1 == stages_, loss_scale(), learning_rate_);
      apply_.push_back(f.optimizer_step);
      f.optimizer_step = [this, s](std::span<const float> g) {
        gradients_[static_cast<std::size_t>(s)].assign(g.begin(), g.end());
      };
      f.forward = [fwd = f.forward, &injection, s](std::int32_t mb, std::span<const float> in, std::span<float> o) {
        injection.before(Op::F, s, mb);
        fwd(mb, in, o);
        injection.after(Op::F, s, mb);
      };
      // MlpStage gives the split backward; ppsched runs B as BI then BW. Wrapping B as well
      // makes the non-split families call a full backward the test can fault.
      f.backward = [bi = f.backward_input, bw = f.backward_weight, &injection, s](
                       std::int32_t mb, std::span<const float> in, std::span<const float> g, std::span<float> gi,
                       std::span<float> w) {
        injection.before(Op::B, s, mb);
        bi(mb, in, g, gi);
        bw(mb, in, g, w);
        injection.after(Op::B, s, mb);
      };
      f.backward_input = [bi = f.backward_input, &injection, s](std::int32_t mb, std::span<const float> in,
                                                                std::span<const float> g, std::span<float> gi) {
        injection.before(Op::BI, s, mb);
        bi(mb, in, g, gi);
        injection.after(Op::BI, s, mb);
      };
      f.backward_weight = [bw = f.backward_weight, &injection, s](std::int32_t mb, std::span<const float> in,
                                                                  std::span<const float> g, std::span<float> w) {
        injection.before(Op::BW, s, mb);
        bw(mb, in, g, w);
        injection.after(Op::BW, s, mb);
      };
      functions.push_back(std::move(f));
    }
    world_ = std::make_unique<World<CpuBackend>>(backends(cluster), schedule, std::move(functions), options);
  }

  // One step on both models from the same batch; true when the pipelined losses and
  // gradients equal the unpipelined ones bit for bit. Applies both updates.
  bool step_matches_reference(std::uint32_t seed) {
    const Batch batch = make_batch(seed);
    const auto& result = world_->run_step({batch.inputs, batch.targets});
    std::vector<float> reference_gradient;
    const auto reference_losses = mlp::train_step_unpipelined(*reference_, batch.inputs, batch.targets, rows_,
                                                              schedule_.microbatches, loss_scale(), learning_rate_,
                                                              &reference_gradient);
    std::vector<float> gradient;
    for (const auto& g : gradients_) gradient.insert(gradient.end(), g.begin(), g.end());
    const bool same = result.losses == reference_losses && gradient == reference_gradient;
    for (int s = 0; s < stages_; ++s) apply_[static_cast<std::size_t>(s)](gradients_[static_cast<std::size_t>(s)]);
    return same;
  }

  void set_watchdog(std::chrono::milliseconds w) { world_->set_watchdog(w); }

  // One step expected to fail; throws what run_step throws. Nothing is applied.
  void failing_step(std::uint32_t seed) {
    const Batch batch = make_batch(seed);
    (void)world_->run_step({batch.inputs, batch.targets});
  }

  [[nodiscard]] bool same_weights() const {
    for (std::size_t l = 0; l < layers_; ++l) {
      const auto a = pipelined_->layers[l].parameters();
      const auto b = reference_->layers[l].parameters();
      if (!std::equal(a.begin(), a.end(), b.begin(), b.end())) return false;
    }
    return true;
  }

 private:
  struct Batch {
    std::vector<float> inputs;
    std::vector<float> targets;
  };

  Schedule schedule_;
  int stages_;
  std::size_t rows_ = 2;
  float learning_rate_ = 0.5f;
  std::size_t layers_ = 0;
  std::vector<std::size_t> widths_;
  std::unique_ptr<mlp::Mlp> pipelined_;
  std::unique_ptr<mlp::Mlp> reference_;
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters_;
  std::vector<std::function<void(std::span<const float>)>> apply_;
  std::vector<std::vector<float>> gradients_;
  std::unique_ptr<World<CpuBackend>> world_;

  [[nodiscard]] float loss_scale() const {
    return 1.0f / static_cast<float>(rows_ * static_cast<std::size_t>(schedule_.microbatches));
  }
  [[nodiscard]] Batch make_batch(std::uint32_t seed) const {
    const auto m = static_cast<std::size_t>(schedule_.microbatches);
    return {data(m * rows_ * widths_.front(), 100u + seed, 1.0f), data(m * rows_ * widths_.back(), 200u + seed, 0.8f)};
  }
};

// Inference through a World (the forward-only schedule) beside the same MLP's forward run
// without a pipeline. The last stage's forward writes each micro-batch's output where the
// test reads it; a micro-batch that never arrives leaves NaN there.
class ForwardTwin {
 public:
  ForwardTwin(const Schedule& schedule, CpuCluster& cluster, const Injection& injection)
      : microbatches_(schedule.microbatches), stages_(schedule.stages()) {
    const auto layers = static_cast<std::size_t>(std::max(4, stages_) + 1);
    widths_.push_back(3);
    for (std::size_t l = 1; l < layers; ++l) widths_.push_back(4 + l % 3);
    widths_.push_back(2);
    model_ = std::make_unique<mlp::Mlp>(widths_, 11);
    std::vector<StageFunctions> functions;
    for (int s = 0; s < stages_; ++s) {
      const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages_);
      const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages_);
      adapters_.push_back(std::make_unique<mlp::MlpStage>(*model_, first, last, rows_, microbatches_));
      const StageFunctions full = adapters_.back()->functions(s + 1 == stages_, 1.0f, 0.0f);
      StageFunctions f;  // inference needs only the sizes and the forward
      f.input_size = full.input_size;
      f.output_size = full.output_size;
      const bool last_stage = s + 1 == stages_;
      f.forward = [fwd = full.forward, &injection, s, last_stage, this](std::int32_t mb, std::span<const float> in,
                                                                         std::span<float> o) {
        injection.before(Op::F, s, mb);
        fwd(mb, in, o);
        if (last_stage) std::copy(o.begin(), o.end(), outputs_.begin() + static_cast<std::ptrdiff_t>(o.size() * static_cast<std::size_t>(mb)));
        injection.after(Op::F, s, mb);
      };
      functions.push_back(std::move(f));
    }
    clear_outputs();
    world_ = std::make_unique<World<CpuBackend>>(backends(cluster), schedule, std::move(functions));
  }

  // One inference step; true when every micro-batch's output equals the unpipelined forward
  // bit for bit.
  bool step_matches_reference(std::uint32_t seed) {
    const std::vector<float> inputs = make_inputs(seed);
    clear_outputs();
    (void)world_->run_step({inputs, {}});
    std::vector<float> expected;
    const std::size_t in = rows_ * widths_.front();
    for (std::size_t mb = 0; mb < static_cast<std::size_t>(microbatches_); ++mb) {
      std::vector<float> x(inputs.begin() + static_cast<std::ptrdiff_t>(mb * in),
                           inputs.begin() + static_cast<std::ptrdiff_t>((mb + 1) * in));
      for (const mlp::Linear& layer : model_->layers) {
        std::vector<float> z(rows_ * layer.out());
        std::vector<float> y(z.size());
        layer.forward(x, z);
        mlp::Tanh::forward(z, y);
        x = std::move(y);
      }
      expected.insert(expected.end(), x.begin(), x.end());
    }
    return outputs_ == expected;
  }

  void failing_step(std::uint32_t seed) {
    const std::vector<float> inputs = make_inputs(seed);
    clear_outputs();
    (void)world_->run_step({inputs, {}});
  }

 private:
  std::int32_t microbatches_;
  int stages_;
  std::size_t rows_ = 2;
  std::vector<std::size_t> widths_;
  std::unique_ptr<mlp::Mlp> model_;
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters_;
  std::vector<float> outputs_;  // written by the last stage's forward, read between steps
  std::unique_ptr<World<CpuBackend>> world_;

  void clear_outputs() {
    outputs_.assign(static_cast<std::size_t>(microbatches_) * rows_ * widths_.back(),
                    std::numeric_limits<float>::quiet_NaN());
  }
  [[nodiscard]] std::vector<float> make_inputs(std::uint32_t seed) const {
    return data(static_cast<std::size_t>(microbatches_) * rows_ * widths_.front(), 300u + seed, 1.0f);
  }
};

// The error `f` throws, or a test failure when it throws none or another type.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  }
  FAIL("expected a ppsched::error");
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// An injected throw's error names where it happened and keeps the callable's message.
void check_names_fault(const std::string& what, int rank, const Action& a) {
  CHECK(contains(what, "rank " + std::to_string(rank)));
  CHECK(contains(what, "stage " + std::to_string(a.stage)));
  CHECK(contains(what, "micro-batch " + std::to_string(a.microbatch)));
  CHECK(contains(what, ppsched::to_string(a)));
  CHECK(contains(what, "injected fault"));
}

// The compute action with this op and micro-batch that comes first in the rank's program.
const Action* find_action(const Schedule& s, int rank, Op op, std::int32_t mb) {
  for (const Action& a : s.programs[static_cast<std::size_t>(rank)]) {
    if (a.op == op && a.microbatch == mb) return &a;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("fault matrix: a throw in F, B, BI or BW on the first, a middle and the last rank and micro-batch",
          "[reliability]") {
  const int threads_before = baseline_threads();
  const int ppsched_threads_before = ppsched::live_threads();
  int cases = 0;
  for (const Family& fam : families) {
    const Schedule s = make(fam, ranks, microbatches);
    CpuCluster cluster(ranks);
    Injection injection;
    ppsched::ExecutorOptions options;
    options.watchdog = 5000ms;  // a backstop: every case here ends by the fault itself
    TwinTraining twin(s, cluster, injection, options);
    REQUIRE(twin.step_matches_reference(0));
    const int threads_running = os_threads();
    std::uint32_t seed = 1;
    // DualPipeV mixes full backwards with split ones: a (rank, micro-batch) has one or the
    // other, so each of its backward kinds is faulted where the rank has it.
    const bool mixed = std::string_view(fam.name) == "dualpipev";
    const std::vector<Op> ops = mixed              ? std::vector<Op>{Op::F, Op::B, Op::BI, Op::BW}
                                : s.split_backward ? std::vector<Op>{Op::F, Op::BI, Op::BW}
                                                   : std::vector<Op>{Op::F, Op::B};
    for (const Op op : ops) {
      for (const int rank : {0, ranks / 2, ranks - 1}) {
        for (const std::int32_t mb : {0, microbatches / 2, microbatches - 1}) {
          const Action* a = find_action(s, rank, op, mb);
          if (mixed && a == nullptr && op != Op::F) {
            // Skipped only when the backward is there in the other form.
            CHECK(find_action(s, rank, op == Op::B ? Op::BI : Op::B, mb) != nullptr);
            continue;
          }
          REQUIRE(a != nullptr);
          injection.kind = Injection::Kind::throw_at;
          injection.op = op;
          injection.stage = a->stage;
          injection.microbatch = mb;
          INFO(fam.name << ": throw at " << ppsched::to_string(*a) << " on rank " << rank);
          const std::string what = error_of([&] { twin.failing_step(seed++); });
          INFO(what);
          check_names_fault(what, rank, *a);
          injection.kind = Injection::Kind::none;
          CHECK(os_threads() == threads_running);
          CHECK(twin.step_matches_reference(seed++));
          ++cases;
        }
      }
    }
    CHECK(twin.same_weights());
  }
  // 5 split-backward families (F, BI, BW), 4 others (F, B), and dualpipev: F at all 9 places
  // and a backward of each kind where the rank runs it.
  CHECK(cases > 5 * 3 * 9 + 4 * 2 * 9 + 9);
  CHECK(ppsched::live_threads() == ppsched_threads_before);
  CHECK(os_threads() == threads_before);
}

TEST_CASE("fault matrix: a rank whose host stops without sending ends the step by the watchdog", "[reliability]") {
  const int threads_before = baseline_threads();
  for (const Family& fam : families) {
    const Schedule good = make(fam, ranks, microbatches);
    CpuCluster cluster(ranks);
    for (const Op send : {Op::SEND_F, Op::SEND_B}) {
      // The middle rank's host stops at its send of the middle micro-batch: the send and
      // everything after it on that rank is never issued.
      const int rank = ranks / 2;
      Schedule broken = good;
      auto& program = broken.programs[static_cast<std::size_t>(rank)];
      const auto stop = std::find_if(program.begin(), program.end(), [&](const Action& a) {
        return a.op == send && a.microbatch == microbatches / 2;
      });
      REQUIRE(stop != program.end());
      const Action stopped_at = *stop;
      program.erase(stop, program.end());
      Injection injection;
      ppsched::ExecutorOptions options;
      options.validate = false;  // the validator rejects the broken schedule, by design
      options.watchdog = 200ms;
      INFO(fam.name << ": rank " << rank << " stops before " << ppsched::to_string(stopped_at));
      {
        TwinTraining twin(broken, cluster, injection, options);
        const std::string what = error_of([&] { twin.failing_step(0); });
        INFO(what);
        // The first watchdog to fire is the rank stuck longest, which need not be the stopped
        // rank's neighbour; whichever it is names its stuck actions and what they wait for.
        CHECK(contains(what, "watchdog"));
        CHECK(contains(what, "waits for"));
        CHECK(contains(what, "to be posted"));
      }
      // The recovered backends run the full schedule right away.
      TwinTraining twin(good, cluster, injection);
      CHECK(twin.step_matches_reference(1));
      CHECK(twin.step_matches_reference(2));
    }
  }
  CHECK(os_threads() == threads_before);
}

TEST_CASE("fault matrix: forward-only, a throw in F on the first, a middle and the last rank and micro-batch",
          "[reliability]") {
  const int threads_before = baseline_threads();
  const Schedule s = make({"forward-only", 1}, ranks, microbatches);
  {
    CpuCluster cluster(ranks);
    Injection injection;
    ForwardTwin twin(s, cluster, injection);
    REQUIRE(twin.step_matches_reference(0));
    const int threads_running = os_threads();
    std::uint32_t seed = 1;
    int cases = 0;
    for (const int rank : {0, ranks / 2, ranks - 1}) {
      for (const std::int32_t mb : {0, microbatches / 2, microbatches - 1}) {
        const Action* a = find_action(s, rank, Op::F, mb);
        REQUIRE(a != nullptr);
        injection.kind = Injection::Kind::throw_at;
        injection.op = Op::F;
        injection.stage = a->stage;
        injection.microbatch = mb;
        INFO("forward-only: throw at " << ppsched::to_string(*a) << " on rank " << rank);
        const std::string what = error_of([&] { twin.failing_step(seed++); });
        INFO(what);
        check_names_fault(what, rank, *a);
        injection.kind = Injection::Kind::none;
        CHECK(os_threads() == threads_running);
        CHECK(twin.step_matches_reference(seed++));
        ++cases;
      }
    }
    CHECK(cases == 9);
  }
  CHECK(os_threads() == threads_before);
}

// A stage callable that runs past the watchdog cannot be interrupted: the step reports the
// timeout, but returns only once the callable has returned (its buffers stay in use until
// then), with the work queued behind it dropped. So the next step starts clean and must be
// exact, and the World can be destroyed right after.
TEST_CASE("fault matrix: a stage that hangs past the watchdog ends the step with a named timeout; the next step "
          "is exact",
          "[reliability]") {
  const int threads_before = baseline_threads();
  for (const Family& fam : families) {
    const Schedule s = make(fam, ranks, microbatches);
    const int rank = ranks / 2;
    const Action* a = find_action(s, rank, Op::F, microbatches / 2);
    REQUIRE(a != nullptr);
    INFO(fam.name << ": " << ppsched::to_string(*a) << " on rank " << rank << " hangs");
    CpuCluster cluster(ranks);
    Injection injection;
    ppsched::ExecutorOptions options;
    // Only the hung step runs under the short watchdog: on a starved machine (TSan, nice 19,
    // load 8 on 2 cores) a healthy step's transfer once waited more than 150 ms.
    options.watchdog = 60s;
    {
      TwinTraining twin(s, cluster, injection, options);
      CHECK(twin.step_matches_reference(0));
      const int threads_running = os_threads();
      injection.kind = Injection::Kind::hang_at;
      injection.op = Op::F;
      injection.stage = a->stage;
      injection.microbatch = a->microbatch;
      injection.duration = 700ms;  // well past the watchdog
      twin.set_watchdog(150ms);
      const std::string what = error_of([&] { twin.failing_step(1); });
      twin.set_watchdog(60s);
      INFO(what);
      CHECK(contains(what, "watchdog: no action completed"));
      // Whichever rank fires first names its stream heads; the hung action is named by its
      // own rank or as what a peer's transfer waits for.
      CHECK((contains(what, ppsched::to_string(*a) + " is running") || contains(what, "to be posted")));
      // The step ended only after the callable returned.
      CHECK(injection.hang_has_ended());
      injection.kind = Injection::Kind::none;
      CHECK(os_threads() == threads_running);
      CHECK(twin.step_matches_reference(2));
      CHECK(twin.step_matches_reference(3));
      CHECK(twin.same_weights());
    }
  }
  CHECK(os_threads() == threads_before);
}

// The reproduction of the reported bug: p = 2, 1F1B, m = 4, F1@s0 hangs past the watchdog
// once; the next step used to pair the failed step's stale send with a new receive, and
// destroying the World used to free buffers the callable still wrote (ASan) or block for
// the backend's 60 s backstop. In checking and in non-checking mode.
TEST_CASE("timeout reproduction: after a hung F1@s0 on 2 ranks the next step is exact and teardown is clean",
          "[reliability]") {
  const int threads_before = baseline_threads();
  for (const bool checking : {true, false}) {
    INFO("checking mode " << checking);
    const Schedule s = make({"1f1b", 1}, 2, 4);
    ppsched::CpuOptions cpu;
    cpu.checking = checking;
    CpuCluster cluster(2, cpu);
    Injection injection;
    ppsched::ExecutorOptions options;
    options.watchdog = 150ms;
    TwinTraining twin(s, cluster, injection, options);
    injection.kind = Injection::Kind::hang_at;
    injection.op = Op::F;
    injection.stage = 0;
    injection.microbatch = 1;
    injection.duration = 700ms;
    const std::string what = error_of([&] { twin.failing_step(0); });
    twin.set_watchdog(60s);  // the healthy steps after it: no false timeout on a starved machine
    INFO(what);
    CHECK(contains(what, "watchdog: no action completed"));
    CHECK(injection.hang_has_ended());
    injection.kind = Injection::Kind::none;
    CHECK(twin.step_matches_reference(1));
    CHECK(twin.step_matches_reference(2));
  }  // the World is destroyed right after its steps
  CHECK(os_threads() == threads_before);
}

// A callable that polls its step's stop token ends the failed step as soon as the watchdog
// (or any rank's error) fires, instead of running its course.
TEST_CASE("fault matrix: a hung stage that watches step_stop_token() returns when the step fails", "[reliability]") {
  const int threads_before = baseline_threads();
  for (const Family& fam : families) {
    const Schedule s = make(fam, ranks, microbatches);
    const int rank = ranks - 1;
    const Action* a = find_action(s, rank, s.split_backward ? Op::BW : Op::B, 0);
    if (a == nullptr) a = find_action(s, rank, Op::B, 0);  // dualpipev: a full B there
    REQUIRE(a != nullptr);
    INFO(fam.name << ": " << ppsched::to_string(*a) << " on rank " << rank << " hangs until stopped");
    CpuCluster cluster(ranks);
    Injection injection;
    ppsched::ExecutorOptions options;
    options.watchdog = 150ms;
    TwinTraining twin(s, cluster, injection, options);
    injection.kind = Injection::Kind::hang_until_stopped;
    injection.op = a->op;
    injection.stage = a->stage;
    injection.microbatch = a->microbatch;
    injection.duration = 20'000ms;  // a bound only: the stop token ends the wait
    const std::string what = error_of([&] { twin.failing_step(0); });
    twin.set_watchdog(60s);  // the healthy step after it: no false timeout on a starved machine
    INFO(what);
    CHECK(contains(what, "watchdog: no action completed"));
    CHECK(injection.hang_has_ended());
    CHECK(injection.saw_stop.load());
    injection.kind = Injection::Kind::none;
    CHECK(twin.step_matches_reference(1));
  }
  CHECK(os_threads() == threads_before);
}

// The watchdog measures from the last completion: a rank whose actions each take a good
// part of the period, for longer than the period in all, is not reported; the action after
// which nothing completes is, by name.
TEST_CASE("watchdog: fires on the stalled action, not on a slow rank that keeps completing", "[reliability]") {
  const Schedule s = make({"1f1b", 1}, 1, 6);
  CpuCluster cluster(1);
  std::atomic<bool> saw_stop{false};
  StageFunctions f;
  f.input_size = f.output_size = f.target_size = 1;
  auto slow = [] { std::this_thread::sleep_for(40ms); };  // a slower device, 1/5 of the period
  f.forward = [&](std::int32_t mb, std::span<const float> in, std::span<float> out) {
    if (mb == 4) {  // stalls here until the step fails
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock<std::mutex> lock(m);
      (void)cv.wait_for(lock, ppsched::step_stop_token(), 20s, [] { return false; });
      saw_stop = ppsched::step_stop_token().stop_requested();
      return;
    }
    slow();
    out[0] = in[0];
  };
  f.backward = [&](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>, std::span<float>) {
    slow();
  };
  f.loss = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float> g) {
    g[0] = 0.0f;
    return 0.0f;
  };
  ppsched::ExecutorOptions options;
  options.watchdog = 200ms;
  World<CpuBackend> world({&cluster.rank(0)}, s, {f}, options);
  const std::vector<float> inputs(6, 1.0f);
  const std::vector<float> targets(6, 0.0f);
  // Eight actions of 40 ms (F0..F3, B0..B3) come before F4: 320 ms of steady progress.
  const std::string what = error_of([&] { (void)world.run_step({inputs, targets}); });
  INFO(what);
  CHECK(contains(what, "watchdog: no action completed for 200 ms"));
  CHECK(contains(what, "compute stream: F4@s0 is running"));
  CHECK(saw_stop.load());
}

TEST_CASE("fault matrix: a slow rank changes the timing, not the results", "[reliability]") {
  const int threads_before = baseline_threads();
  for (const Family& fam : families) {
    const Schedule s = make(fam, ranks, microbatches);
    for (const int rank : {0, ranks / 2, ranks - 1}) {
      CpuCluster cluster(ranks);
      Injection injection;
      injection.kind = Injection::Kind::slow_rank;
      injection.duration = 1ms;
      injection.slow_stage.assign(static_cast<std::size_t>(s.stages()), false);
      for (int st = 0; st < s.stages(); ++st) injection.slow_stage[static_cast<std::size_t>(st)] = s.rank_of(st) == rank;
      TwinTraining twin(s, cluster, injection);
      INFO(fam.name << ": rank " << rank << " slow");
      CHECK(twin.step_matches_reference(0));
      CHECK(twin.step_matches_reference(1));
      CHECK(twin.same_weights());
    }
  }
  CHECK(os_threads() == threads_before);
}

TEST_CASE("soak: 10,000 steps on 4 ranks allocate nothing after warm-up and lose no micro-batch", "[reliability]") {
  long steps = 10'000;
  if (const char* env = std::getenv("PPSCHED_SOAK_STEPS")) steps = std::max(200L, std::atol(env));
  const long warmup = 100;
  const int p = 4;
  const int m = 8;
  const std::size_t floats = 4;
  const Schedule s = make({"1f1b", 1}, p, m);
  const int threads_before = baseline_threads();
  {
    CpuCluster cluster(p);
    // Fast synthetic stages (zero cost: no wait), each counting the micro-batches it sees.
    // One counter per (stage, direction, micro-batch), each written by one stream only.
    auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), p, m, 1ms, floats);
    const auto slots = static_cast<std::size_t>(p) * static_cast<std::size_t>(m);
    std::vector<long> forwards(slots, 0);
    std::vector<long> backwards(slots, 0);
    std::vector<long> optimizer_steps(static_cast<std::size_t>(p), 0);
    for (int st = 0; st < p; ++st) {
      auto& f = stages[static_cast<std::size_t>(st)];
      const auto base = static_cast<std::size_t>(st) * static_cast<std::size_t>(m);
      f.weight_grad_size = 2;  // exercise the gradient buffers
      f.forward = [fwd = f.forward, &forwards, base](std::int32_t mb, std::span<const float> in, std::span<float> o) {
        ++forwards[base + static_cast<std::size_t>(mb)];
        fwd(mb, in, o);
      };
      f.backward = [bwd = f.backward, &backwards, base](std::int32_t mb, std::span<const float> in,
                                                        std::span<const float> g, std::span<float> gi,
                                                        std::span<float> w) {
        ++backwards[base + static_cast<std::size_t>(mb)];
        bwd(mb, in, g, gi, w);
      };
      f.optimizer_step = [&optimizer_steps, st](std::span<const float> g) {
        if (g.size() == 2) ++optimizer_steps[static_cast<std::size_t>(st)];
      };
    }
    ppsched::ExecutorOptions options;
    options.record_timeline = false;
    World<CpuBackend> world(backends(cluster), s, stages, options);
    // Micro-batch mb carries the value mb in every float, the target is 0: the identity
    // stages make each loss 0.5 * floats * mb^2, so a micro-batch delivered into another's
    // buffer shows in the losses.
    std::vector<float> inputs;
    for (int mb = 0; mb < m; ++mb) inputs.insert(inputs.end(), floats, static_cast<float>(mb));
    const std::vector<float> targets(static_cast<std::size_t>(m) * floats, 0.0f);
    std::vector<float> expected_losses;
    for (int mb = 0; mb < m; ++mb) expected_losses.push_back(0.5f * static_cast<float>(floats) * static_cast<float>(mb * mb));

    long wrong_losses = 0;
    for (long step = 0; step < warmup; ++step) {
      if (world.run_step({inputs, targets}).losses != expected_losses) ++wrong_losses;
    }
    const long resident_after_warmup = resident_pages();
    allocations = 0;
    counting = true;
    for (long step = warmup; step < steps; ++step) {
      if (world.run_step({inputs, targets}).losses != expected_losses) ++wrong_losses;
    }
    counting = false;
    const long resident_at_end = resident_pages();

    CHECK(allocations.load() == 0);
    CHECK(wrong_losses == 0);
    // No allocation means no growth; the margin (64 pages) is for the kernel's own accounting.
    // Under a sanitizer the runtime's shadow memory and fake stacks grow on their own, so
    // only the allocation count speaks there.
    INFO("resident pages after warm-up " << resident_after_warmup << ", at the end " << resident_at_end);
    if (!under_sanitizer) CHECK(resident_at_end <= resident_after_warmup + 64);
    for (std::size_t i = 0; i < slots; ++i) {
      INFO("stage " << i / static_cast<std::size_t>(m) << ", micro-batch " << i % static_cast<std::size_t>(m));
      CHECK(forwards[i] == steps);
      CHECK(backwards[i] == steps);
    }
    for (const long n : optimizer_steps) CHECK(n == steps);
  }
  CHECK(os_threads() == threads_before);
}
