// The types of lowering (<ppsched/lower/lower.hpp>, whose header comment gives the rule): the
// options lower() takes and the LoweredSchedule it returns, with the proof it carries. Include
// <ppsched/lower/lower.hpp>; these sit in a header of their own so that the internals in
// lower/detail/lower.hpp build on them without including the public header back.
#pragma once

#include <functional>
#include <utility>

#include "ppsched/config.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct LowerOptions {
  // Compute time of each action for the idealised run that orders the communication;
  // positive and finite. Empty: F = BI = BW = 1 and B = 2. Give your cost model's times
  // (costs/cost_model.hpp: lower_options_for) so the order matches the run you expect.
  std::function<double(const Action&)> compute_time;
  // Transfer time of each send (SEND_F / SEND_B), >= 0 and finite, added to the idealised
  // run's cross-rank dependencies, and the time a transfer takes when lower() compares its
  // candidate orders (step 4 of lower.hpp's header comment). Empty: free transfers.
  std::function<double(const Action&)> transfer_time;
  // Post communication that becomes ready at the same instant as one group.
  bool group_simultaneous = true;
  // Share of the shorter action of each overlapped pair hidden under the longer, in [0, 1]
  // (CostModel::fb_overlap); only the idealised run's times depend on it.
  double fb_overlap = 0.0;
};

namespace detail {
struct LoweringAccess;
}  // namespace detail

// What lower() returns: the lowered schedule, immutable, with what lowering proved of it.
// It converts to `const Schedule&`, so everything that takes a Schedule takes it; validate()
// and simulate() of a LoweredSchedule skip the checks its construction proves. A copy taken
// out (`Schedule s = lower(...)`, or std::move(l).release()) is a plain Schedule again,
// checked in full wherever it goes.
class LoweredSchedule {
 public:
  [[nodiscard]] const Schedule& schedule() const noexcept { return schedule_; }
  operator const Schedule&() const noexcept { return schedule_; }  // NOLINT: a LoweredSchedule is a Schedule
  // Hands the schedule over without copying; the proof does not go with it. (Not a second
  // implicit conversion: `schedule = lower(...)` would be ambiguous between the two.)
  [[nodiscard]] Schedule release() && noexcept { return std::move(schedule_); }

  // lower() wrote the communication: every static check of validate() holds and no timing
  // can deadlock, with communication on its own stream or on the compute stream. False when
  // lower() returned a schedule that already had communication (validate() checks that one).
  [[nodiscard]] bool proven() const noexcept { return proven_; }
  // The schedule has communication (false when every stage is on one rank).
  [[nodiscard]] bool communicates() const noexcept { return communicates_; }
  [[nodiscard]] bool has_backward() const noexcept { return has_backward_; }
  [[nodiscard]] bool has_pairs() const noexcept { return has_pairs_; }

  friend bool operator==(const LoweredSchedule& a, const LoweredSchedule& b) { return a.schedule_ == b.schedule_; }
  friend bool operator==(const LoweredSchedule& a, const Schedule& b) { return a.schedule_ == b; }

 private:
  friend struct detail::LoweringAccess;
  LoweredSchedule(Schedule s, bool proven, bool communicates, bool has_backward, bool has_pairs) noexcept
      : schedule_(std::move(s)),
        proven_(proven),
        communicates_(communicates),
        has_backward_(has_backward),
        has_pairs_(has_pairs) {}

  Schedule schedule_;
  bool proven_ = false;
  bool communicates_ = false;
  bool has_backward_ = false;
  bool has_pairs_ = false;
};

namespace detail {

struct LoweringAccess {
  [[nodiscard]] static LoweredSchedule proven(Schedule s, bool communicates, bool has_backward, bool has_pairs) {
    return LoweredSchedule(std::move(s), true, communicates, has_backward, has_pairs);
  }
  // A schedule that already had communication: lower() leaves it as it is, unproven.
  [[nodiscard]] static LoweredSchedule unproven(Schedule s) {
    return LoweredSchedule(std::move(s), false, true, false, false);
  }
};

}  // namespace detail

}  // namespace ppsched
