// Variable-length batches (issue 42): from the lengths of a global batch's sequences to
// micro-batches, their costs and a schedule, fast enough to plan every step.
//
// 1. Costs from lengths. A transformer stage's time on a micro-batch grows with its tokens
//    (the GEMMs) and with the square of each sequence's length (attention), and pays a fixed
//    part per micro-batch (launches, the step's host work). So each stage's F, BI, BW (and B)
//    is fitted as  fixed + per_token x tokens + per_square x sum(len_i^2)  by least squares of
//    the relative error to micro-batches measured at several shapes (fit_length_costs); memory is linear in the
//    tokens (fixed + per_token x tokens). The fit is checked against the points it was fitted
//    to: each term reports its largest residual, absolute and relative. Points that cannot
//    tell the terms apart (all at one sequence length: sum(len^2) is then length x tokens) are
//    refused, naming the term, rather than fitted to an arbitrary split.
// 2. Micro-batches from a batch (split_batch): padding each micro-batch to its longest
//    sequence, packing to a fixed token count (first-fit decreasing), length buckets, and
//    `balanced`, which balances the micro-batches' predicted costs and orders them so that the
//    pipeline fills and drains on cheap ones. A micro-batch may hold at most a token limit:
//    the token budget, and what the memory cap allows on the stage holding the most in flight.
// 3. A plan every step (plan_microbatches): the micro-batches' costs go into CostModel's
//    per-(stage, micro-batch) table (length_cost_model) and the schedule search chooses among
//    the fixed families and its greedy construction with those costs.
//
// docs/plan.md ("Variable-length batches") is the guide; examples/varlen_plan.cpp runs it on a
// long-tailed length distribution.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/plan/search/search.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// ---------------------------------------------------------------------------------------
// 1. Costs of a micro-batch from its sequences' lengths

// What a micro-batch computes: its tokens (padding included) and the sum of its sequences'
// squared lengths (attention looks within each sequence; a padded sequence at its padded length).
struct MicrobatchShape {
  double tokens = 0.0;
  double squares = 0.0;

  friend bool operator==(const MicrobatchShape&, const MicrobatchShape&) = default;
};

// One measured micro-batch: its sequences' lengths as run (a padded sequence at its padded
// length) and what each stage cost on it (StageCost's times and bytes; its optional fields
// but `backward` are not read).
struct LengthSample {
  std::vector<std::int64_t> lengths;
  std::vector<StageCost> stages;
};

// One fitted quantity: fixed + per_token x tokens + per_square x squares, with how far it
// lies from the points it was fitted to.
struct TermFit {
  double fixed = 0.0;
  double per_token = 0.0;
  double per_square = 0.0;  // 0 for bytes (linear in tokens)
  double max_residual = 0.0;           // largest |measured - fitted| over the samples
  double max_relative_residual = 0.0;  // the same over |measured| (points measured as 0 left out)

  // Never below 0: a fit with a negative fixed part would price a tiny micro-batch below nothing.
  [[nodiscard]] double at(const MicrobatchShape& s) const noexcept {
    return std::max(0.0, fixed + per_token * s.tokens + per_square * s.squares);
  }
};

struct StageLengthFit {
  TermFit forward, backward_input, backward_weight;
  std::optional<TermFit> backward;  // when every sample measured the full backward
  TermFit activation_bytes, output_bytes;
};

// Per stage, what a micro-batch of any shape costs.
struct LengthCosts {
  std::vector<StageLengthFit> stages;
  std::size_t samples = 0;

  // The largest relative residual over every stage and quantity: how well the model explains
  // its own measurements (a few percent is measurement noise; tens of percent, a missing term).
  [[nodiscard]] double max_relative_residual() const noexcept {
    double r = 0.0;
    for (const StageLengthFit& s : stages) {
      for (const TermFit* t : {&s.forward, &s.backward_input, &s.backward_weight, &s.activation_bytes, &s.output_bytes})
        r = std::max(r, t->max_relative_residual);
      if (s.backward) r = std::max(r, s.backward->max_relative_residual);
    }
    return r;
  }
};

// The shape of a micro-batch of these lengths, each padded to `padded_length` when it is > 0.
[[nodiscard]] inline MicrobatchShape shape_of(std::span<const std::int64_t> lengths, std::int64_t padded_length = 0) {
  MicrobatchShape s;
  for (const std::int64_t l : lengths) {
    const auto len = static_cast<double>(padded_length > 0 ? padded_length : l);
    s.tokens += len;
    s.squares += len * len;
  }
  return s;
}

}  // namespace plan
namespace detail {

// Weighted least squares over the columns 1, tokens and (when `quadratic`) squares, by modified
// Gram-Schmidt on unit-scaled columns (tokens reach 1e5 and squares 1e9: unscaled normal
// equations would square a condition number of 1e9). A column that its predecessors explain to
// within 1e-6 of its norm is not determined by the points: `dependent` names it (1: tokens, 2:
// squares) and the coefficients are left 0.
struct LeastSquares {
  double coef[3]{0.0, 0.0, 0.0};
  int dependent = -1;
};

inline LeastSquares fit_terms(const std::vector<plan::MicrobatchShape>& x, const std::vector<double>& y, bool quadratic) {
  const std::size_t n = x.size();
  const int k = quadratic ? 3 : 2;
  std::vector<std::vector<double>> q(static_cast<std::size_t>(k), std::vector<double>(n));
  double scale[3]{1.0, 1.0, 1.0};
  // Relative errors are minimised: each row weighs 1 / |y| (a timing's noise grows with it, and
  // a plain fit lets the largest points pull the line tens of percent off the smallest ones).
  const double top = y.empty() ? 0.0 : std::abs(*std::max_element(y.begin(), y.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }));
  std::vector<double> w(n, 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (top > 0.0) w[i] = 1.0 / std::max(std::abs(y[i]), 1e-6 * top);
    q[0][i] = w[i];
    q[1][i] = w[i] * x[i].tokens;
    if (quadratic) q[2][i] = w[i] * x[i].squares;
  }
  double r[3][3]{};
  LeastSquares out;
  for (int j = 0; j < k; ++j) {
    std::vector<double>& c = q[static_cast<std::size_t>(j)];
    double norm = std::sqrt(std::inner_product(c.begin(), c.end(), c.begin(), 0.0));
    if (norm == 0.0) {
      out.dependent = j;
      return out;
    }
    scale[j] = norm;
    for (double& v : c) v /= norm;
    for (int i = 0; i < j; ++i) {
      const std::vector<double>& qi = q[static_cast<std::size_t>(i)];
      const double d = std::inner_product(qi.begin(), qi.end(), c.begin(), 0.0);
      r[i][j] = d;
      for (std::size_t t = 0; t < n; ++t) c[t] -= d * qi[t];
    }
    norm = std::sqrt(std::inner_product(c.begin(), c.end(), c.begin(), 0.0));
    if (norm < 1e-6) {
      out.dependent = j;
      return out;
    }
    r[j][j] = norm;
    for (double& v : c) v /= norm;
  }
  double b[3]{};
  for (int j = 0; j < k; ++j) {
    for (std::size_t i = 0; i < n; ++i) b[j] += q[static_cast<std::size_t>(j)][i] * w[i] * y[i];
  }
  for (int j = k - 1; j >= 0; --j) {
    double v = b[j];
    for (int i = j + 1; i < k; ++i) v -= r[j][i] * out.coef[i];
    out.coef[j] = v / r[j][j];
  }
  for (int j = 0; j < k; ++j) out.coef[j] /= scale[j];
  return out;
}

}  // namespace detail
namespace plan {

// Fits every stage's times as fixed + per_token x tokens + per_square x sum(len^2) and its bytes
// as fixed + per_token x tokens, by least squares of the relative error over the samples
// (detail::fit_terms: a point's noise grows with its size, and small micro-batches matter), and
// records each fit's largest residual against the samples. Throws ppsched::error naming the
// sample or the term: no samples, a sample without lengths, a negative length, stage counts
// that differ, a negative or non-finite measured value, fewer samples than terms, all samples
// with one token count (the per-token term is not determined: measure several sizes), or
// sum(len^2) a linear function of the tokens across the samples (all at one sequence length:
// the attention term is not determined; measure at two lengths or more).
[[nodiscard]] inline LengthCosts fit_length_costs(std::span<const LengthSample> samples) {
  using detail::concat;
  const char* who = "fit_length_costs";
  if (samples.empty()) detail::fail({who, "no samples", "samples", "measure micro-batches at several sizes and sequence lengths"});
  const std::size_t stages = samples.front().stages.size();
  if (stages == 0) detail::fail({who, "sample 0 measures no stage", "samples[0].stages", "give one StageCost per stage"});
  std::vector<MicrobatchShape> x;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const LengthSample& s = samples[i];
    if (s.lengths.empty()) detail::fail({who, detail::concat("sample ", i, " has no sequences"), detail::concat("samples[", i, "].lengths"), "list the lengths of its sequences"});
    for (std::size_t j = 0; j < s.lengths.size(); ++j) {
      if (s.lengths[j] < 1) {
        detail::fail({who, detail::concat("sample ", i, " has a sequence of length ", s.lengths[j]), detail::concat("samples[", i, "].lengths[", j, "]"),
              "a sequence holds at least one token"});
      }
    }
    if (s.stages.size() != stages) {
      detail::fail({who, detail::concat("sample ", i, " measures ", s.stages.size(), " stages, sample 0 ", stages), detail::concat("samples[", i, "].stages"),
            "measure every stage in every sample"});
    }
    x.push_back(shape_of(s.lengths));
  }
  if (samples.size() < 3) {
    detail::fail({who, detail::concat(samples.size(), " samples for 3 terms (fixed, per token, per squared length)"), "samples",
          "measure at least three micro-batches: two sizes at one length and one at another length"});
  }
  const bool with_backward = std::all_of(samples.begin(), samples.end(), [](const LengthSample& s) {
    return std::all_of(s.stages.begin(), s.stages.end(), [](const StageCost& c) { return c.backward.has_value(); });
  });
  LengthCosts out;
  out.samples = samples.size();
  out.stages.resize(stages);
  std::vector<double> y(samples.size());
  const auto fit = [&](std::size_t stage, const char* field, bool quadratic, auto get) {
    for (std::size_t i = 0; i < samples.size(); ++i) {
      y[i] = get(samples[i].stages[stage]);
      if (!(y[i] >= 0.0 && y[i] <= std::numeric_limits<double>::max())) {
        detail::fail({who, detail::concat("sample ", i, " stage ", stage, " measured ", field, " = ", y[i]), detail::concat("samples[", i, "].stages[", stage, "].", field),
              "measured times and bytes are finite and >= 0"});
      }
    }
    const detail::LeastSquares ls = detail::fit_terms(x, y, quadratic);
    if (ls.dependent == 1) {
      detail::fail({who, detail::concat("every sample has ", x.front().tokens, " tokens: the per-token term is not determined"), "samples",
            "measure micro-batches of at least two sizes"});
    }
    if (ls.dependent == 2) {
      detail::fail({who, "the samples' sum(len^2) is a linear function of their tokens (all at one sequence length, say): the attention term "
                 "cannot be told from the per-token term",
            "samples", "measure micro-batches at two sequence lengths or more"});
    }
    TermFit t{ls.coef[0], ls.coef[1], ls.coef[2]};
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const double fitted = t.fixed + t.per_token * x[i].tokens + t.per_square * x[i].squares;
      const double r = std::abs(y[i] - fitted);
      t.max_residual = std::max(t.max_residual, r);
      if (y[i] > 0.0) t.max_relative_residual = std::max(t.max_relative_residual, r / y[i]);
    }
    return t;
  };
  for (std::size_t s = 0; s < stages; ++s) {
    StageLengthFit& f = out.stages[s];
    f.forward = fit(s, "forward", true, [](const StageCost& c) { return c.forward; });
    f.backward_input = fit(s, "backward_input", true, [](const StageCost& c) { return c.backward_input; });
    f.backward_weight = fit(s, "backward_weight", true, [](const StageCost& c) { return c.backward_weight; });
    if (with_backward) f.backward = fit(s, "backward", true, [](const StageCost& c) { return *c.backward; });
    f.activation_bytes = fit(s, "activation_bytes", false, [](const StageCost& c) { return c.activation_bytes; });
    f.output_bytes = fit(s, "output_bytes", false, [](const StageCost& c) { return c.output_bytes; });
  }
  return out;
}

// The samples of a profile measured at several micro-batch sizes, every sequence `sequence_length`
// tokens long: one sample per measured size (CostPoint::rows sequences), one stage per layer (as
// profiling::measured_profile writes stage functions: one layer each). Give profiles measured at
// two lengths or more to fit_length_costs together. Throws ppsched::error for a length < 1, a
// profile without layers, layers measured at different sizes, or a size that is not a whole
// number of sequences.
[[nodiscard]] inline std::vector<LengthSample> length_samples(const Profile& profile, std::int64_t sequence_length) {
  using detail::concat;
  const char* who = "length_samples";
  if (sequence_length < 1) detail::fail({who, detail::concat("sequence_length = ", sequence_length), "sequence_length", "give the tokens per sequence the profile was measured at, >= 1"});
  if (profile.graph.size() == 0) detail::fail({who, "the profile has no layers", "profile.graph", "measure the stages first (profiling::measured_profile)"});
  const std::vector<CostPoint>& first = profile.graph.layer(0).points;
  if (first.empty()) detail::fail({who, "layer 0 has no measured points", "profile.graph.layer(0).points", "measure several micro-batch sizes (ProfileOptions::rows)"});
  std::vector<LengthSample> out;
  for (std::size_t k = 0; k < first.size(); ++k) {
    const double rows = first[k].rows;
    if (!(rows >= 1.0 && rows == std::floor(rows) && rows < 1e9)) {
      detail::fail({who, detail::concat("a point at ", rows, " rows"), detail::concat("layer 0 points[", k, "]"), "measure whole numbers of sequences"});
    }
    LengthSample s;
    s.lengths.assign(static_cast<std::size_t>(rows), sequence_length);
    for (std::size_t l = 0; l < profile.graph.size(); ++l) {
      const std::vector<CostPoint>& pts = profile.graph.layer(l).points;
      if (pts.size() != first.size() || pts[k].rows != rows) {
        detail::fail({who, detail::concat("layer ", l, " was not measured at the sizes of layer 0"), detail::concat("layer ", l, " points"),
              "measure every layer at the same micro-batch sizes"});
      }
      const CostPoint& p = pts[k];
      StageCost c{p.forward, p.backward_input, p.backward_weight, p.activation_bytes, p.output_bytes};
      c.backward = p.backward;
      s.stages.push_back(c);
    }
    out.push_back(std::move(s));
  }
  return out;
}

// A stage's costs on a micro-batch of this shape.
[[nodiscard]] inline StageCost stage_cost_at(const StageLengthFit& f, const MicrobatchShape& shape) {
  StageCost c{f.forward.at(shape), f.backward_input.at(shape), f.backward_weight.at(shape), f.activation_bytes.at(shape),
              f.output_bytes.at(shape)};
  if (f.backward) c.backward = f.backward->at(shape);
  return c;
}

// ---------------------------------------------------------------------------------------
// 2. Micro-batches from a batch

enum class SplitMethod : std::uint8_t {
  padded,    // in arrival order, a fixed number of sequences each, padded to the micro-batch's longest
  packed,    // packed to a fixed token count, first-fit decreasing; no padding
  bucketed,  // sorted by length, consecutive lengths together, padded to the micro-batch's longest
  balanced,  // packed, the micro-batches' predicted costs balanced, cheap ones first and last
};

[[nodiscard]] constexpr std::string_view split_method_name(SplitMethod m) noexcept {
  switch (m) {
    case SplitMethod::padded: return "padded";
    case SplitMethod::packed: return "packed";
    case SplitMethod::bucketed: return "bucketed";
    case SplitMethod::balanced: return "balanced";
  }
  return "?";
}

struct Microbatch {
  std::vector<std::size_t> sequences;  // indices into the batch's lengths
  std::int64_t tokens = 0;             // real tokens (no padding)
  std::int64_t padded_length = 0;      // every sequence runs at this length; 0: packed, no padding
  MicrobatchShape shape;               // what it computes (shape_of)

  friend bool operator==(const Microbatch&, const Microbatch&) = default;
};

struct SplitOptions {
  // Tokens a micro-batch may compute, padding included; empty: no budget of its own.
  std::optional<std::int64_t> token_budget{};
  // Stored activation bytes per rank: stage s's rank s keeps to cap.activation_bytes_of(s)
  // (`activation_bytes`, `rank_activation_bytes`, and a total limit, which counts activations
  // alone here; an M_B cap is refused). A rank holds, at 1F1B's peak, stage s's activations of
  // (stages - s) micro-batches; the largest micro-batch is taken for each, so every micro-batch
  // may hold the tokens whose fitted activation_bytes x (stages - s) fits on every stage.
  MemoryCap cap{};
  // padded and bucketed without a limit, and packed: at most this many micro-batches (ceil(n / m)
  // sequences, or ceil(tokens / m) tokens, each); 0: as the token limit gives. padded: exactly
  // ceil(n / m) sequences each where the limit allows.
  std::int32_t microbatches = 0;
};

struct Split {
  SplitMethod method = SplitMethod::packed;
  std::vector<Microbatch> microbatches;  // in the order they run
  std::int64_t token_limit = 0;          // tokens a micro-batch could hold (budget and cap); int64 max: none
  double tokens = 0.0;                   // real tokens of the batch
  double computed_tokens = 0.0;          // with padding

  [[nodiscard]] double padding_fraction() const noexcept {
    return computed_tokens > 0.0 ? (computed_tokens - tokens) / computed_tokens : 0.0;
  }
};

// The tokens a micro-batch may hold under the options: the budget and, per stage s of the
// fit's S stages, the tokens whose activation_bytes x (S - s) keep to the cap. Throws
// ppsched::error for a budget < 1, a cap that is NaN or <= 0 (or in M_B), or a cap that not
// even the fixed bytes of a micro-batch fit under.
[[nodiscard]] inline std::int64_t token_limit(const LengthCosts& costs, const SplitOptions& options) {
  using detail::concat;
  constexpr std::int64_t none = std::numeric_limits<std::int64_t>::max();
  std::int64_t limit = none;
  if (options.token_budget) {
    if (*options.token_budget < 1) {
      detail::fail({"split_batch", detail::concat("token_budget = ", *options.token_budget), "SplitOptions::token_budget", "give >= 1 token, or none"});
    }
    limit = *options.token_budget;
  }
  const std::size_t S = costs.stages.size();
  detail::check_memory_cap(options.cap, static_cast<std::int32_t>(S));
  if (!std::isinf(options.cap.microbatches)) {
    detail::fail({"split_batch", detail::concat("a cap of ", options.cap.microbatches, " M_B, which gives no token count"), "SplitOptions::cap.microbatches",
          "give the activation bytes per rank (cap.activation_bytes), or infinity for none"});
  }
  for (std::size_t s = 0; s < S; ++s) {
    const double cap = options.cap.activation_bytes_of(static_cast<std::int32_t>(s));
    if (std::isinf(cap)) continue;
    const TermFit& b = costs.stages[s].activation_bytes;
    const double per_microbatch = cap / static_cast<double>(S - s);
    if (b.fixed > per_microbatch) {
      detail::fail({"split_batch", detail::concat("stage ", s, " holds ", S - s, " micro-batches at 1F1B's peak and ", bytes_text(b.fixed),
                                  " each before any token: more than the cap of ", bytes_text(cap)),
            "SplitOptions::cap", "raise the cap, or use fewer stages"});
    }
    if (b.per_token > 0.0) {
      const double t = std::floor((per_microbatch - std::max(b.fixed, 0.0)) / b.per_token);
      limit = std::min(limit, t >= 9e18 ? none : static_cast<std::int64_t>(t));
    }
  }
  return limit;
}

}  // namespace plan
namespace detail {

inline plan::Microbatch make_microbatch(std::vector<std::size_t> seqs, std::span<const std::int64_t> lengths, bool padded) {
  plan::Microbatch mb;
  std::int64_t longest = 0;
  for (const std::size_t i : seqs) {
    mb.tokens += lengths[i];
    longest = std::max(longest, lengths[i]);
  }
  mb.padded_length = padded ? longest : 0;
  std::vector<std::int64_t> ls;
  ls.reserve(seqs.size());
  for (const std::size_t i : seqs) ls.push_back(lengths[i]);
  mb.shape = plan::shape_of(ls, mb.padded_length);
  mb.sequences = std::move(seqs);
  return mb;
}

// Predicted time of a micro-batch on its costliest stage, F + B (the full backward, or BI + BW).
inline double bottleneck_time(const plan::LengthCosts& costs, const plan::MicrobatchShape& shape) {
  double t = 0.0;
  for (const plan::StageLengthFit& f : costs.stages) {
    const double b = f.backward ? f.backward->at(shape) : f.backward_input.at(shape) + f.backward_weight.at(shape);
    t = std::max(t, f.forward.at(shape) + b);
  }
  return t;
}

// First-fit decreasing into micro-batches of `capacity` tokens.
inline std::vector<std::vector<std::size_t>> first_fit_decreasing(std::span<const std::int64_t> lengths, std::int64_t capacity) {
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<std::size_t>> bins;
  std::vector<std::int64_t> room;
  for (const std::size_t i : order) {
    std::size_t b = 0;
    while (b < bins.size() && room[b] < lengths[i]) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      room.push_back(capacity);
    }
    bins[b].push_back(i);
    room[b] -= lengths[i];
  }
  return bins;
}

// Sequences in the given order into micro-batches padded to their longest: a new one starts at
// `per` sequences or where the next would take the padded tokens past `limit`.
inline std::vector<std::vector<std::size_t>> padded_groups(std::span<const std::int64_t> lengths, std::span<const std::size_t> order,
                                                           std::size_t per, std::int64_t limit) {
  std::vector<std::vector<std::size_t>> groups;
  std::int64_t longest = 0;
  for (const std::size_t i : order) {
    const std::int64_t l = std::max(longest, lengths[i]);
    if (groups.empty() || groups.back().size() >= per ||
        static_cast<double>(groups.back().size() + 1) * static_cast<double>(l) > static_cast<double>(limit)) {
      groups.emplace_back();
      longest = 0;
    }
    groups.back().push_back(i);
    longest = std::max(longest, lengths[i]);
  }
  return groups;
}

// `balanced` for m micro-batches: sequences by decreasing predicted cost, each to the cheapest
// micro-batch with room (longest processing time first); one more micro-batch where none has room.
inline std::vector<plan::Microbatch> balance(const plan::LengthCosts& costs, std::span<const std::int64_t> lengths, std::size_t m,
                                             std::int64_t limit, std::span<const std::size_t> by_length_desc) {
  std::vector<std::vector<std::size_t>> bins(m);
  std::vector<plan::MicrobatchShape> shape(m);
  std::vector<double> cost(m, 0.0);
  for (const std::size_t i : by_length_desc) {
    const auto l = static_cast<double>(lengths[i]);
    std::size_t best = bins.size();
    for (std::size_t b = 0; b < bins.size(); ++b) {
      if (shape[b].tokens + l <= static_cast<double>(limit) && (best == bins.size() || cost[b] < cost[best])) best = b;
    }
    if (best == bins.size()) {
      bins.emplace_back();
      shape.emplace_back();
      cost.push_back(0.0);
    }
    bins[best].push_back(i);
    shape[best].tokens += l;
    shape[best].squares += l * l;
    cost[best] = bottleneck_time(costs, shape[best]);
  }
  std::vector<plan::Microbatch> out;
  for (auto& b : bins) {
    if (!b.empty()) out.push_back(make_microbatch(std::move(b), lengths, false));
  }
  // The pipeline fills on the first micro-batch's forwards and drains on the last one's
  // backwards: the cheapest runs first, the next cheapest last, the rest costliest first, so the
  // long ones meet a full pipeline.
  std::vector<double> t(out.size());
  for (std::size_t k = 0; k < out.size(); ++k) t[k] = bottleneck_time(costs, out[k].shape);
  std::vector<std::size_t> idx(out.size());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return t[a] > t[b]; });
  std::vector<plan::Microbatch> ordered;
  ordered.reserve(out.size());
  if (!idx.empty()) ordered.push_back(out[idx.back()]);
  for (std::size_t k = 0; k + 2 < idx.size(); ++k) ordered.push_back(out[idx[k]]);
  if (idx.size() >= 2) ordered.push_back(out[idx[idx.size() - 2]]);
  return ordered;
}

// A cheap stand-in for the step of 1F1B over these micro-batches on the fit's S stages: each
// runs on the bottleneck in turn, and the costliest crosses the other S - 1 stages once.
inline double estimated_step(const plan::LengthCosts& costs, const std::vector<plan::Microbatch>& mbs) {
  double sum = 0.0, worst = 0.0;
  for (const plan::Microbatch& mb : mbs) {
    const double t = bottleneck_time(costs, mb.shape);
    sum += t;
    worst = std::max(worst, t);
  }
  return sum + static_cast<double>(costs.stages.size() - 1) * worst;
}

}  // namespace detail
namespace plan {

// Splits a batch of sequences (their lengths, in arrival order) into micro-batches by `method`
// and orders them (SplitMethod says how each works). `balanced` tries micro-batch counts from
// first-fit decreasing's up to 4 times it (never more than the sequences) and keeps the one with
// the smallest estimated 1F1B step (detail::estimated_step); the others do not read `costs` but
// for the memory cap. Throws ppsched::error naming the input: an empty batch, a length < 1 (its
// index), a sequence longer than any micro-batch may hold under the budget and the cap (its index,
// its length and the limit), packing without a budget, a cap or a micro-batch count, a negative count.
[[nodiscard]] inline Split split_batch(std::span<const std::int64_t> lengths, const LengthCosts& costs, SplitMethod method,
                                       const SplitOptions& options = {}) {
  using detail::concat;
  const char* who = "split_batch";
  if (lengths.empty()) detail::fail({who, "the batch is empty", "lengths", "give the lengths of at least one sequence"});
  if (costs.stages.empty()) detail::fail({who, "the costs have no stages", "costs", "fit_length_costs first"});
  if (options.microbatches < 0) detail::fail({who, detail::concat("microbatches = ", options.microbatches), "SplitOptions::microbatches", "give a count >= 0 (0: as the limit gives)"});
  Split out;
  out.method = method;
  out.token_limit = token_limit(costs, options);
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) detail::fail({who, detail::concat("sequence ", i, " has length ", lengths[i]), detail::concat("lengths[", i, "]"), "a sequence holds at least one token"});
    if (lengths[i] > out.token_limit) {
      detail::fail({who, detail::concat("sequence ", i, " has ", lengths[i], " tokens; a micro-batch may hold ", out.token_limit,
                        " under the token budget and the memory cap"),
            detail::concat("lengths[", i, "]"), "truncate or split the sequence, or raise the budget or the cap"});
    }
    longest = std::max(longest, lengths[i]);
    out.tokens += static_cast<double>(lengths[i]);
  }
  const std::size_t n = lengths.size();
  const auto m = static_cast<std::size_t>(options.microbatches);
  const std::size_t per = m > 0 ? (n + m - 1) / m : n;
  constexpr std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const auto total = static_cast<std::int64_t>(out.tokens);
  // Packing's fixed count: the limit, or the tokens shared among the count asked for.
  std::int64_t capacity = out.token_limit;
  if (m > 0) capacity = std::min(capacity, std::max<std::int64_t>(longest, (total + static_cast<std::int64_t>(m) - 1) / static_cast<std::int64_t>(m)));
  switch (method) {
    case SplitMethod::padded: {
      if (out.token_limit == none && m == 0) {
        detail::fail({who, "padding without a token budget, a memory cap or a micro-batch count", "SplitOptions", "give one of them"});
      }
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      for (auto& g : detail::padded_groups(lengths, order, per, out.token_limit)) out.microbatches.push_back(detail::make_microbatch(std::move(g), lengths, true));
      break;
    }
    case SplitMethod::bucketed: {
      if (out.token_limit == none && m == 0) {
        detail::fail({who, "buckets without a token budget, a memory cap or a micro-batch count", "SplitOptions", "give one of them"});
      }
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
      for (auto& g : detail::padded_groups(lengths, order, per, out.token_limit)) out.microbatches.push_back(detail::make_microbatch(std::move(g), lengths, true));
      break;
    }
    case SplitMethod::packed:
    case SplitMethod::balanced: {
      if (capacity == none) {
        detail::fail({who, detail::concat(split_method_name(method), " without a token budget, a memory cap or a micro-batch count"), "SplitOptions",
              "give one of them: packing needs a token count to pack to"});
      }
      auto bins = detail::first_fit_decreasing(lengths, capacity);
      if (method == SplitMethod::packed) {
        for (auto& b : bins) out.microbatches.push_back(detail::make_microbatch(std::move(b), lengths, false));
        break;
      }
      std::vector<std::size_t> order(n);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
      const std::size_t lo = bins.size();
      double best = std::numeric_limits<double>::infinity();
      std::size_t last = 0;
      for (const double f : {1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0}) {
        const std::size_t count = std::min(n, static_cast<std::size_t>(std::ceil(static_cast<double>(lo) * f)));
        if (count == last) continue;
        last = count;
        std::vector<Microbatch> mbs = detail::balance(costs, lengths, count, out.token_limit, order);
        const double est = detail::estimated_step(costs, mbs);
        if (est < best) {
          best = est;
          out.microbatches = std::move(mbs);
        }
      }
      break;
    }
  }
  for (const Microbatch& mb : out.microbatches) out.computed_tokens += mb.shape.tokens;
  return out;
}

// ---------------------------------------------------------------------------------------
// 3. A plan every step

// The CostModel of these micro-batches on the fit's stages: `base` (unit, link, fixed costs,
// weight_memory_fraction, ...) with its per_microbatch table filled, stage-major, from the fit.
[[nodiscard]] inline CostModel length_cost_model(const LengthCosts& costs, std::span<const Microbatch> microbatches,
                                                 CostModel base = {}) {
  if (costs.stages.empty()) detail::fail({"length_cost_model", "the costs have no stages", "costs", "fit_length_costs first"});
  if (microbatches.empty()) detail::fail({"length_cost_model", "no micro-batches", "microbatches", "split_batch first"});
  base.stages.clear();
  base.microbatch_scale.clear();
  base.per_microbatch.clear();
  base.per_microbatch.reserve(costs.stages.size() * microbatches.size());
  for (const StageLengthFit& f : costs.stages) {
    for (const Microbatch& mb : microbatches) base.per_microbatch.push_back(stage_cost_at(f, mb.shape));
  }
  return base;
}

struct StepPlanOptions {
  CostModel base{};  // what length_cost_model starts from
  // Per rank, what the schedule keeps to (the search's SearchProblem::cap; the fit gives no
  // static bytes, so a total limit bounds the activations alone).
  MemoryCap cap{};
  // The search's settings. The defaults aim at a plan within about a millisecond at p = 8,
  // m = 64 (bench/bench_varlen.cpp, docs/performance.md): the fixed families on one stage per
  // rank (chunks {1}), no greedy construction, V placements, V building blocks or DualPipeV. The
  // others find faster schedules (a few percent on examples/varlen_plan.cpp) but cost about half
  // a millisecond a candidate there; add them (search.chunks = {1, 2}, search.greedy, ...) where
  // the step is long enough to pay for them.
  SearchOptions search = [] {
    SearchOptions o;
    o.chunks = {1};
    o.greedy = false;
    o.v_blocks = false;
    o.dualpipev = false;
    return o;
  }();
};

// The schedule for these micro-batches, chosen by the search over their own costs
// (length_cost_model on the fit's stages; placements with chunks cut each stage evenly:
// evenly_split). The result holds the costs, the winner lowered, validated and simulated.
// Throws ppsched::error as search_schedule does (no candidate under the cap among them).
[[nodiscard]] inline SearchResult plan_microbatches(const LengthCosts& costs, std::span<const Microbatch> microbatches,
                                                    const StepPlanOptions& options = {}) {
  const auto p = static_cast<std::int32_t>(costs.stages.size());
  const auto m = static_cast<std::int32_t>(microbatches.size());
  SearchProblem problem;
  problem.ranks = p;
  problem.microbatches = m;
  problem.costs = evenly_split(length_cost_model(costs, microbatches, options.base), p, m);
  problem.cap = options.cap;
  return search_schedule(problem, options.search);
}


// ---------------------------------------------------------------------------------------
// 4. The order of the micro-batches

// A plan that chose the micro-batches' order as well as the schedule.
struct StepPlan {
  std::vector<std::size_t> order;      // slot k runs the given micro-batch order[k]: a permutation
  std::vector<Microbatch> microbatches;  // the given ones in that order
  SearchResult search;                 // the schedule for them in that order (its costs, simulation, ...)
  double given_order_makespan = 0.0;   // the search's winner on the given order, simulated
  std::size_t orders_tried = 0;        // orders timed on the given order's winner
};

struct OrderOptions {
  // Orders timed by a dependency-only run of the given order's winner (each about as long as
  // one candidate's bound): the fixed arrangements below, then swaps that improve, until this many.
  std::size_t evaluations = 8;
};

}  // namespace plan
namespace detail {

// Orders worth timing, from each micro-batch's predicted time t: as given; ascending; descending;
// and, for k of 1, 2, p/2 and p - 1, the k cheapest first (ascending: the pipeline fills on
// them), the next k cheapest last (descending: it drains on them) and the rest costliest first.
// The fill and the drain cross every stage on one micro-batch each; the steady state hides the
// rest.
inline std::vector<std::vector<std::size_t>> order_candidates(const std::vector<double>& t, std::size_t p) {
  const std::size_t m = t.size();
  std::vector<std::size_t> asc(m);
  std::iota(asc.begin(), asc.end(), std::size_t{0});
  std::stable_sort(asc.begin(), asc.end(), [&](std::size_t a, std::size_t b) { return t[a] < t[b]; });
  std::vector<std::vector<std::size_t>> out;
  std::vector<std::size_t> given(m);
  std::iota(given.begin(), given.end(), std::size_t{0});
  out.push_back(given);
  out.push_back(asc);
  out.emplace_back(asc.rbegin(), asc.rend());
  for (const std::size_t k : {std::size_t{1}, std::size_t{2}, p / 2, p - 1}) {
    if (k == 0 || 2 * k > m) continue;
    std::vector<std::size_t> o(asc.begin(), asc.begin() + static_cast<std::ptrdiff_t>(k));
    for (std::size_t i = m; i-- > 2 * k;) o.push_back(asc[i]);
    for (std::size_t i = 2 * k; i-- > k;) o.push_back(asc[i]);
    if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(std::move(o));
  }
  return out;
}

}  // namespace detail
namespace plan {

// The schedule and the order of the micro-batches for one step. The search first picks the
// schedule for the given order (plan_microbatches); its winner is then timed with the
// micro-batches in other orders (detail::order_candidates, then swaps of two slots that shorten
// it, as OrderOptions::evaluations allows), each by the dependency-only run on its own costs and
// kept only where its peak memory keeps to the cap; where an order beats the given one, the
// search runs again on it, so the schedule may change with the order. The result is never slower
// than the given order's plan: that plan is returned when nothing beats it. Throws as
// plan_microbatches does.
[[nodiscard]] inline StepPlan plan_step(const LengthCosts& costs, std::span<const Microbatch> microbatches,
                                        const StepPlanOptions& options = {}, const OrderOptions& order_options = {}) {
  StepPlan out;
  out.search = plan_microbatches(costs, microbatches, options);
  out.given_order_makespan = out.search.simulation.makespan;
  const std::size_t m = microbatches.size();
  out.order.resize(m);
  std::iota(out.order.begin(), out.order.end(), std::size_t{0});
  out.microbatches.assign(microbatches.begin(), microbatches.end());
  if (m < 2) return out;

  const Schedule& winner = out.search.schedule;
  const auto p = static_cast<std::int32_t>(costs.stages.size());
  const MemoryCap& cap = options.cap;
  std::vector<double> t(m);
  for (std::size_t k = 0; k < m; ++k) t[k] = detail::bottleneck_time(costs, microbatches[k].shape);
  Workspace ws;
  std::vector<Microbatch> permuted(m);
  // The winner's makespan with the micro-batches in order `o`; infinity where it breaks the cap.
  const auto time_order = [&](const std::vector<std::size_t>& o) {
    ++out.orders_tried;
    for (std::size_t k = 0; k < m; ++k) permuted[k] = microbatches[o[k]];
    const CostModel c = evenly_split(length_cost_model(costs, permuted, options.base), p, static_cast<std::int32_t>(m))(winner.placement);
    if (!cap.unlimited() && !cap_excess(peak_memory(winner, c), cap).empty()) return std::numeric_limits<double>::infinity();
    return run_dependencies(winner, c, ws).makespan;
  };
  std::vector<std::size_t> best_order = out.order;
  double best = std::numeric_limits<double>::infinity();
  for (const std::vector<std::size_t>& o : detail::order_candidates(t, static_cast<std::size_t>(p))) {
    if (out.orders_tried >= order_options.evaluations) break;
    const double ms = time_order(o);
    if (ms < best) {
      best = ms;
      best_order = o;
    }
  }
  // Swaps of a slot in the fill or the drain (the first and last p) with any other slot whose
  // micro-batch is cheaper there, first improvement kept, while evaluations remain.
  for (bool improved = true; improved && out.orders_tried < order_options.evaluations;) {
    improved = false;
    for (std::size_t i = 0; i < m && !improved && out.orders_tried < order_options.evaluations; ++i) {
      if (i >= static_cast<std::size_t>(p) && i + static_cast<std::size_t>(p) < m) continue;
      for (std::size_t j = 0; j < m && out.orders_tried < order_options.evaluations; ++j) {
        if (j == i || t[best_order[j]] >= t[best_order[i]]) continue;
        std::vector<std::size_t> o = best_order;
        std::swap(o[i], o[j]);
        const double ms = time_order(o);
        if (ms < best) {
          best = ms;
          best_order = std::move(o);
          improved = true;
          break;
        }
      }
    }
  }
  std::vector<std::size_t> given(m);
  std::iota(given.begin(), given.end(), std::size_t{0});
  if (best_order == given) return out;
  for (std::size_t k = 0; k < m; ++k) permuted[k] = microbatches[best_order[k]];
  SearchResult again = plan_microbatches(costs, permuted, options);
  if (!(again.simulation.makespan < out.given_order_makespan)) return out;
  out.search = std::move(again);
  out.order = std::move(best_order);
  out.microbatches = std::move(permuted);
  return out;
}

}  // namespace plan
}  // namespace ppsched
