// Profiles as JSON (graph/profile_json.hpp, the format ppsched-plan --profile reads). That
// header needs nlohmann-json; a build without it keeps the functions, which then raise
// ppsched.Error saying so, so that `import ppsched` and everything else still work.
#include "common.hpp"

#include <string>

#include "ppsched/graph/profile.hpp"
#if PPSCHED_PY_JSON
#include "ppsched/graph/profile_json.hpp"
#endif

namespace ppsched_py {
namespace {

namespace pp = ppsched;

#if !PPSCHED_PY_JSON
[[noreturn]] void no_json(const char* function) {
  pp::detail::fail({function, "this build of ppsched has no JSON reader (nlohmann-json was not found when it was built)", "",
            "install nlohmann-json (Debian: nlohmann-json3-dev) and reinstall ppsched"});
}
#endif

}  // namespace

void bind_profile(py::module_& m) {
  m.def(
      "load_profile",
      [](const std::string& path) -> pp::Profile {
#if PPSCHED_PY_JSON
        return pp::load_profile(path);
#else
        (void)path;
        no_json("load_profile");
#endif
      },
      py::arg("path"),
      "Reads a JSON profile (docs/profile-format.md; what ppsched-plan --profile reads). Raises\n"
      "ppsched.Error naming the file, the place (line and column, or a path such as layers[3].forward)\n"
      "and what was expected.");
  m.def(
      "parse_profile",
      [](const std::string& text, const std::string& source) -> pp::Profile {
#if PPSCHED_PY_JSON
        return pp::parse_profile(text, source);
#else
        (void)text;
        (void)source;
        no_json("parse_profile");
#endif
      },
      py::arg("text"), py::kw_only(), py::arg("source") = "<string>", "A profile from JSON text.");
  m.def(
      "profile_to_json",
      [](const pp::Profile& profile, int indent) -> std::string {
#if PPSCHED_PY_JSON
        return pp::profile_to_json(profile, indent);
#else
        (void)profile;
        (void)indent;
        no_json("profile_to_json");
#endif
      },
      py::arg("profile"), py::kw_only(), py::arg("indent") = 2,
      "The profile as JSON that parse_profile reads back to an equal Profile.");
}

}  // namespace ppsched_py
