// The bodies of <ppsched/schedule/one_f_one_b.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void append_1f1b_program(std::vector<Action>& program, std::int32_t stage, std::int32_t ranks,
                                std::int32_t microbatches) {
  const std::int32_t warmup = std::min(ranks - stage - 1, microbatches);
  for (std::int32_t mb = 0; mb < warmup; ++mb) program.push_back(compute_action(Op::F, stage, mb));
  for (std::int32_t mb = 0; mb + warmup < microbatches; ++mb) {
    program.push_back(compute_action(Op::F, stage, mb + warmup));
    program.push_back(compute_action(Op::B, stage, mb));
  }
  for (std::int32_t mb = microbatches - warmup; mb < microbatches; ++mb)
    program.push_back(compute_action(Op::B, stage, mb));
}

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> one_f_one_b_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(detail::one_f_one_b_name, r, 1, "1f1b places one stage per rank",
                                  "for several chunks per rank use interleaved-1f1b");
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule make_1f1b(const ScheduleRequest& r) {
  if (auto problem = detail::one_f_one_b_problem(r)) detail::fail(*problem);
  Schedule s = detail::empty_schedule(detail::one_f_one_b_name, r, one_stage_per_rank_placement(r.ranks), false,
                                      2 * static_cast<std::size_t>(r.microbatches));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank)
    detail::append_1f1b_program(s.programs[static_cast<std::size_t>(rank)], rank, r.ranks, r.microbatches);
  return s;
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> interleaved_1f1b_problem(const ScheduleRequest& r) {
  if (auto problem = request_size_problem(detail::interleaved_1f1b_name, r)) return problem;
  if (interleaved_1f1b_accepts(r)) return std::nullopt;
  const std::int32_t below = (r.microbatches / r.ranks) * r.ranks;
  const std::int32_t above = below + r.ranks;
  return error_context{
      family_subject(detail::interleaved_1f1b_name),
      detail::concat("with v > 1 chunks per rank, m must be a multiple of p=", r.ranks, " (got m=", r.microbatches,
             "), because Megatron's interleaving runs micro-batches through each chunk in groups of p"),
      detail::concat("request ", to_string(r)),
      below >= r.ranks ? detail::concat("nearest valid: m=", below, " or m=", above)
                       : detail::concat("nearest valid: m=", above, ", or v=1 (plain 1F1B accepts any m)")};
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule make_interleaved_1f1b(const ScheduleRequest& r) {
  if (auto problem = detail::interleaved_1f1b_problem(r)) detail::fail(*problem);
  Schedule s = detail::empty_schedule(
      detail::interleaved_1f1b_name, r, looped_placement(r.ranks, r.chunks), false,
      2 * static_cast<std::size_t>(r.microbatches) * static_cast<std::size_t>(r.chunks));
  if (r.chunks == 1) {
    for (std::int32_t rank = 0; rank < r.ranks; ++rank)
      detail::append_1f1b_program(s.programs[static_cast<std::size_t>(rank)], rank, r.ranks, r.microbatches);
    return s;
  }
  const std::int32_t p = r.ranks;
  const std::int32_t v = r.chunks;
  const std::int32_t total = r.microbatches * v;
  const auto chunk_of = [&](std::int32_t k) { return (k / p) % v; };
  const auto microbatch_of = [&](std::int32_t k) { return (k / (p * v)) * p + k % p; };
  for (std::int32_t rank = 0; rank < p; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    const auto forward = [&](std::int32_t k) {
      program.push_back(detail::compute_action(Op::F, chunk_of(k) * p + rank, microbatch_of(k)));
    };
    const auto backward = [&](std::int32_t k) {
      program.push_back(detail::compute_action(Op::B, (v - 1 - chunk_of(k)) * p + rank, microbatch_of(k)));
    };
    const std::int32_t warmup = std::min(2 * (p - rank - 1) + (v - 1) * p, total);
    for (std::int32_t k = 0; k < warmup; ++k) forward(k);
    for (std::int32_t k = 0; k + warmup < total; ++k) {
      forward(k + warmup);
      backward(k);
    }
    for (std::int32_t k = total - warmup; k < total; ++k) backward(k);
  }
  return s;
}

}  // namespace ppsched
