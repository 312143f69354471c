// The bodies of <ppsched/graph/tensor.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_tensor_specs(std::span<const TensorSpec> specs, std::string_view where) {
  std::size_t total = align_payload(specs.size() * sizeof(std::uint64_t));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::size_t limit = (std::numeric_limits<std::size_t>::max() - total) / 2 / dtype_size(specs[i].dtype);
    if (specs[i].max_count > limit) {
      detail::fail({std::string(where), detail::concat("tensor ", i, " declares ", specs[i].max_count, " elements of ",
                                               to_string(specs[i].dtype), ", more than memory holds"),
            detail::concat("tensor ", i), "Declare the largest count a micro-batch really carries"});
    }
    total += align_payload(specs[i].max_count * dtype_size(specs[i].dtype));
  }
}

}  // namespace detail
}  // namespace ppsched
