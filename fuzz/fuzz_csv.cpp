// libFuzzer harness: the PyTorch-style CSV schedule loader (schedule/csv.hpp) fed arbitrary
// text. A ppsched::error is the expected answer to bad input; anything else is a bug. An
// accepted schedule goes on to the validator (which must answer with a report, never an
// exception) and through the CSV writer and back: the reloaded programs must be the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ppsched/error.hpp>
#include <ppsched/schedule/csv.hpp>
#include <ppsched/validate/validate.hpp>
#include <string_view>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ppsched::CsvReadOptions options;
  options.source = "fuzz.csv";
  ppsched::Schedule schedule;
  try {
    schedule = ppsched::from_pytorch_csv(text, options);
  } catch (const ppsched::error&) {
    return 0;
  }
  ppsched::ValidateOptions vo;
  vo.max_problems = 50;
  (void)ppsched::validate(schedule, vo);

  ppsched::CsvReadOptions again_options;
  again_options.microbatches = schedule.microbatches;
  again_options.placement = schedule.placement;
  const ppsched::Schedule again = ppsched::from_pytorch_csv(ppsched::to_pytorch_csv(schedule), again_options);
  PPSCHED_FUZZ_CHECK(again.programs == schedule.programs && again.ranks == schedule.ranks,
                     "a schedule read back from its own CSV is the same schedule");
  return 0;
}
