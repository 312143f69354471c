// DualPipeV: DeepSeek's DualPipe cut in half (Sea AI Lab's "cut-in-half" V schedule, as in
// deepseek-ai/DualPipe's dualpipev.py). Two chunks per rank in a V (rank r holds stages r and
// 2p-1-r, as ZB-V), at least 2p micro-batches, and a steady state of F&B pairs: the forward of
// one chunk run overlapped with the backward of the other chunk, so that one micro-batch's
// communication hides under the other's computation. DeepSeek's table gives its bubble as
// (p-1)(T_F&B + T_B - 3 T_BW), T_F&B being the time of one overlapped pair, for p+1 stages'
// worth of activations per device.
//
// Each pair is emitted as a compute group (docs/execution-model.md, "Overlapped pairs"): the
// pair's F then its B, adjacent, sharing a nonzero Action::group. The validator, lower(), the
// simulator (CostModel::fb_overlap says how much of the pair overlaps) and run_dependencies()
// treat the two as one item; the executor runs them as F then B. Rank r's program, with
// c0 = stage r, c1 = stage 2p-1-r and deferred BWs run oldest first:
//   1. 2(p-r-1) forwards of c0;
//   2. r+1 times: F c0, F c1;
//   3. p-r-1 times: BI c1, its BW, F c1;
//   4. m-2p+r+1 times: pair (F c0, B c1), pair (F c1, B c0) — on the last rank the first
//      (F c0, B c1) is not overlapped;
//   5. p-r-1 times: B c1, pair (F c1, B c0);
//   6. r+1 times: backward of c1, backward of c0 — full B until halfway, then BI with the BW
//      deferred (from c1 on odd ranks, from c0 on even ones);
//   7. p-r-1 times: the oldest deferred BW, BI c0 (its BW deferred);
//   8. the deferred BWs.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {  // the canonical names; users read them from family_info(name).name
inline constexpr std::string_view dualpipev_name = "dualpipev";
}  // namespace detail

// Whether make_dualpipev(r) would succeed: v = 2 and m >= 2p (the sizes every family checks
// included).
[[nodiscard]] PPSCHED_OUTLINE bool dualpipev_accepts(const ScheduleRequest& r) noexcept;

namespace detail {

// What make_dualpipev refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> dualpipev_problem(const ScheduleRequest& r);

}  // namespace detail

// DualPipeV for p ranks, m >= 2p micro-batches, v = 2, its F&B pairs as compute groups (ids
// 1, 2, ... along each rank's program). Throws ppsched::error otherwise, saying the nearest
// valid request.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_dualpipev(const ScheduleRequest& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/dualpipev.ipp"
#endif
