// The figures both accuracy reports (bench_accuracy, bench_accuracy_torch) compute from their
// measurements, in one place so that their tables mean the same thing: the median over every
// repetition of every pass, the noise floor (how far the passes' own medians differ, relative
// to that median), the error of a prediction, Kendall's tau between two orderings, and the
// quartiles of the paired errors (each step against a profile taken right before it, paired.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace accuracy {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Ties count neither way: two configurations measured equal say nothing about the ordering.
inline double kendall_tau(const std::vector<double>& x, const std::vector<double>& y) {
  double concordant = 0.0, discordant = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    for (std::size_t j = i + 1; j < x.size(); ++j) {
      const double v = (x[i] - x[j]) * (y[i] - y[j]);
      if (v > 0) concordant += 1;
      if (v < 0) discordant += 1;
    }
  }
  const double n = static_cast<double>(x.size());
  return n < 2 ? 0.0 : (concordant - discordant) / (n * (n - 1) / 2.0);
}

// One configuration's measured steps, each pass's repetitions apart.
struct Spread {
  double median = 0.0;  // of every repetition of every pass
  double min = 0.0, max = 0.0;
  double noise = 0.0;   // (largest - smallest pass median) / median
};

inline Spread spread_of(const std::vector<std::vector<double>>& passes) {
  std::vector<double> every;
  for (const auto& p : passes) every.insert(every.end(), p.begin(), p.end());
  Spread s;
  if (every.empty()) return s;
  s.median = median(every);
  s.min = *std::min_element(every.begin(), every.end());
  s.max = *std::max_element(every.begin(), every.end());
  double lo = median(passes.front()), hi = lo;
  for (const auto& p : passes) {
    lo = std::min(lo, median(p));
    hi = std::max(hi, median(p));
  }
  s.noise = (hi - lo) / s.median;
  return s;
}

// Mean and largest |error| of a column of predictions.
struct Errors {
  double sum = 0.0, max = 0.0;
  std::size_t count = 0;
  // Returns the signed error of `predicted` against `measured`, for the table.
  double add(double predicted, double measured) {
    const double e = (predicted - measured) / measured;
    sum += std::abs(e);
    max = std::max(max, std::abs(e));
    ++count;
    return e;
  }
  [[nodiscard]] double mean() const { return count == 0 ? 0.0 : sum / static_cast<double>(count); }
};

// A sample's extremes and quartiles (linear between the order statistics).
struct Quartiles {
  double min = 0.0, q1 = 0.0, median = 0.0, q3 = 0.0, max = 0.0;
  std::size_t count = 0;
};

inline Quartiles quartiles_of(std::vector<double> v) {
  Quartiles q;
  q.count = v.size();
  if (v.empty()) return q;
  std::sort(v.begin(), v.end());
  const auto at = [&](double f) {
    const double x = f * static_cast<double>(v.size() - 1);
    const auto i = static_cast<std::size_t>(x);
    return i + 1 < v.size() ? v[i] + (x - static_cast<double>(i)) * (v[i + 1] - v[i]) : v[i];
  };
  q.min = v.front();
  q.q1 = at(0.25);
  q.median = at(0.5);
  q.q3 = at(0.75);
  q.max = v.back();
  return q;
}

// One configuration's pairs: per measured step, the prediction from the profile taken right
// before it and the step. Its error is the median of the pairs' signed errors, its prediction
// the median of the pairs' predictions.
struct Pairs {
  std::vector<double> predicted, measured;
  void add(double p, double m) {
    predicted.push_back(p);
    measured.push_back(m);
  }
  [[nodiscard]] std::vector<double> errors() const {
    std::vector<double> e;
    for (std::size_t i = 0; i < predicted.size(); ++i) e.push_back((predicted[i] - measured[i]) / measured[i]);
    return e;
  }
  [[nodiscard]] double error() const { return predicted.empty() ? 0.0 : median(errors()); }
  [[nodiscard]] double prediction() const { return predicted.empty() ? 0.0 : median(predicted); }
  // How far the fresh profiles moved the prediction: (largest - smallest) / median.
  [[nodiscard]] double drift() const {
    if (predicted.empty()) return 0.0;
    const auto [lo, hi] = std::minmax_element(predicted.begin(), predicted.end());
    return (*hi - *lo) / median(predicted);
  }
};

}  // namespace accuracy
