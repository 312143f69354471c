// Writes fuzz_validate seeds: every registered family's small schedules (p, m <= 4, v <= 2,
// as generated and lowered) in the harness's byte format, so that the fuzzer starts from
// schedules the validator accepts, pairs and grouped transfers included, and mutates from
// there (random bytes alone seldom make a valid schedule). A schedule the format cannot hold
// (more than 8 stages, 40 actions on a rank or 7 group ids on a rank) is left out.
// Build and run by hand, from the repository root; the corpus keeps the seeds that add
// coverage (libFuzzer's merge), one name per distinct content:
//   g++ -std=c++20 -Iinclude fuzz/make_validate_seeds.cpp -o /tmp/make_validate_seeds
//   mkdir /tmp/seeds && /tmp/make_validate_seeds /tmp/seeds
//   fuzz_validate -merge=1 fuzz/corpus/validate /tmp/seeds
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <ppsched/error.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

namespace {

constexpr std::uint8_t grouped_compute_bit = 0x40;  // fuzz_validate.cpp's shape bit

// The inverse of fuzz_validate's decoding; nullopt when the schedule does not fit it.
std::optional<std::vector<std::uint8_t>> encode(const ppsched::Schedule& s) {
  if (s.stages() > 8 || s.ranks > 4 || s.microbatches > 4) return std::nullopt;
  std::vector<std::uint8_t> out;
  // Bit 1 keeps the shape byte off the harness's "odd shape" values (multiples of 32).
  out.push_back(static_cast<std::uint8_t>(grouped_compute_bit | 0x2u | (s.split_backward ? 1u : 0u)));
  out.push_back(static_cast<std::uint8_t>(s.ranks - 1));
  out.push_back(static_cast<std::uint8_t>(s.microbatches - 1));
  out.push_back(static_cast<std::uint8_t>(s.stages() - 1));
  for (const std::int32_t rank : s.placement) out.push_back(static_cast<std::uint8_t>(rank));
  for (const auto& program : s.programs) {
    if (program.size() > 40) return std::nullopt;
    out.push_back(static_cast<std::uint8_t>(program.size()));
    std::map<std::uint32_t, std::uint32_t> renumbered;  // ids only need to be distinct per rank
    for (const ppsched::Action& a : program) {
      out.push_back(static_cast<std::uint8_t>(a.op));
      out.push_back(static_cast<std::uint8_t>(a.stage + 1));
      out.push_back(static_cast<std::uint8_t>(a.microbatch + 1));
      std::uint32_t id = 0;
      if (a.group != 0) id = renumbered.try_emplace(a.group, static_cast<std::uint32_t>(renumbered.size() + 1)).first->second;
      if (id > 7) return std::nullopt;
      out.push_back(static_cast<std::uint8_t>(id));
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  int written = 0;
  for (const std::string_view family : ppsched::family_names()) {
    for (std::int32_t p = 1; p <= 4; ++p)
      for (std::int32_t m = 1; m <= 4; ++m)
        for (std::int32_t v = 1; v <= 2; ++v)
          for (const bool lowered : {false, true}) {
            ppsched::Schedule s;
            try {
              s = ppsched::make_schedule(family, {.ranks = p, .microbatches = m, .chunks = v});
              if (lowered) s = ppsched::lower(s);
            } catch (const ppsched::error&) {
              continue;  // a request the family does not take
            }
            const auto bytes = encode(s);
            if (!bytes) continue;
            const std::string path = std::string(argv[1]) + "/" + std::string(family) + "-p" + std::to_string(p) +
                                     "-m" + std::to_string(m) + "-v" + std::to_string(v) +
                                     (lowered ? "-lowered" : "");
            std::ofstream(path, std::ios::binary)
                .write(reinterpret_cast<const char*>(bytes->data()), static_cast<std::streamsize>(bytes->size()));
            ++written;
          }
  }
  std::printf("%d seeds written\n", written);
}
