// libFuzzer harness: the JSON profile loader (graph/profile_json.hpp) fed arbitrary text.
// A ppsched::error is the expected answer to bad input; any other exception, a crash or a
// sanitizer report is a bug. An accepted profile must survive a round trip through its own
// JSON writer unchanged, so the loader and the writer agree on every profile they accept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ppsched/error.hpp>
#include <ppsched/graph/profile_json.hpp>
#include <string_view>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ppsched::Profile profile;
  try {
    profile = ppsched::parse_profile(text, "fuzz.json");
  } catch (const ppsched::error&) {
    return 0;
  }
  const ppsched::Profile again = ppsched::parse_profile(ppsched::profile_to_json(profile), "round-trip.json");
  PPSCHED_FUZZ_CHECK(again.graph == profile.graph, "a profile read back from its own JSON is the same graph");
  return 0;
}
