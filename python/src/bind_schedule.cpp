// Actions, schedules, the families and their generators, PyTorch's CSV and action strings,
// lowering and validation.
#include "common.hpp"

#include <cstddef>
#include <algorithm>
#include <map>
#include <sstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/validate.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
using pp::detail::concat;

std::string action_repr(const pp::Action& a) {
  std::string s = concat("Action(stage=", a.stage, ", op='", op_text(a.op), "', microbatch=", a.microbatch);
  if (a.group != 0) s += concat(", group=", a.group);
  return s + ")";
}

std::string schedule_repr(const pp::Schedule& s) {
  std::size_t actions = 0;
  for (const auto& program : s.programs) actions += program.size();
  return concat("Schedule(name=", py::repr(py::str(s.name)).cast<std::string>(), ", ranks=", s.ranks,
                ", stages=", s.stages(), ", microbatches=", s.microbatches, ", actions=", actions,
                pp::is_lowered(s) ? ", lowered=True" : "", ")");
}

// What a request's chunk count is when Python leaves it out: two for the families that take
// any number (looped), each family's own otherwise, as the C++ examples choose.
std::int32_t chunks_or_default(const pp::FamilyInfo& f, std::optional<std::int32_t> chunks) {
  return chunks ? *chunks : f.chunks_for(2);
}

// The schedule in the form a PyTorch CSV format asks for: compute_only has no communication,
// compute_comms is lowered (lower()'s order and groups, unless it was lowered already).
pp::Schedule in_csv_form(const pp::Schedule& s, bool comms) {
  if (comms) return pp::is_lowered(s) ? s : pp::lower(s).release();
  return pp::is_lowered(s) ? pp::strip_communication(s) : s;
}

pp::CsvWriteOptions csv_options(bool groups, std::string_view line_end, bool bookkeeping) {
  pp::CsvWriteOptions o;
  o.write_groups = groups;
  o.line_end = line_end;
  o.pytorch_bookkeeping = bookkeeping;
  return o;
}

// Cells cannot hold what the CSV would read as a separator: a PyTorch action string never does.
void check_action_text(const std::string& text, const std::string& subject) {
  if (text.find_first_of(",\"\r\n") != std::string::npos)
    pp::detail::fail({subject, concat("'", text, "' holds a comma, a quote or a line break"), "",
              "give one action string per item, as PyTorch's _Action prints it, e.g. 0F3 or (0F7;7B3)OVERLAP_F_B"});
}

pp::CsvReadOptions read_options(std::optional<std::vector<std::int32_t>> placement, std::int32_t microbatches,
                                std::string name, std::string source) {
  pp::CsvReadOptions o;
  o.source = std::move(source);
  o.name = std::move(name);
  o.microbatches = microbatches;
  if (placement) o.placement = std::move(*placement);
  return o;
}

}  // namespace

void bind_schedule(py::module_& m) {
  // ------------------------------------------------------------------ Action
  py::class_<pp::Action>(m, "Action",
                         "One action of a rank's program: an operation on a (virtual) stage for a micro-batch.\n\n"
                         "op is PyTorch's spelling: F, B, I (backward for the input), W (backward for the\n"
                         "weights), SEND_F, RECV_F, SEND_B, RECV_B, and ppsched's memory actions R (recompute),\n"
                         "OFFLOAD, RELOAD. group: consecutive actions of a rank sharing a nonzero group form one\n"
                         "unit (communication posted together, or DualPipe's overlapped F&B pair).\n"
                         "str(action) is PyTorch's action string, e.g. '0F3'.")
      .def(py::init([](std::int32_t stage, const std::string& op, std::int32_t microbatch, std::uint32_t group) {
             return pp::Action{op_from_text(op), stage, microbatch, group};
           }),
           py::arg("stage"), py::arg("op"), py::arg("microbatch"), py::arg("group") = 0)
      .def_property_readonly("stage", [](const pp::Action& a) { return a.stage; })
      .def_property_readonly("op", [](const pp::Action& a) { return op_text(a.op); })
      .def_property_readonly("microbatch", [](const pp::Action& a) { return a.microbatch; })
      .def_property_readonly("group", [](const pp::Action& a) { return a.group; })
      .def_property_readonly("is_compute", [](const pp::Action& a) { return pp::is_compute(a.op); },
                             "F, B, I or W.")
      .def_property_readonly("is_comm", [](const pp::Action& a) { return pp::is_comm(a.op); },
                             "SEND_F, RECV_F, SEND_B or RECV_B.")
      .def_property_readonly("is_memory", [](const pp::Action& a) { return pp::is_memory(a.op); },
                             "R, OFFLOAD or RELOAD.")
      .def("__str__", [](const pp::Action& a) { return pp::csv_cell(a); })
      .def("__repr__", &action_repr)
      .def("__eq__", [](const pp::Action& a, const pp::Action& b) { return a == b; }, py::is_operator())
      .def("__lt__", [](const pp::Action& a, const pp::Action& b) { return a < b; }, py::is_operator())
      .def("__hash__",
           [](const pp::Action& a) {
             return py::hash(py::make_tuple(static_cast<int>(a.op), a.stage, a.microbatch, a.group));
           })
      .def(py::pickle([](const pp::Action& a) { return py::make_tuple(a.stage, op_text(a.op), a.microbatch, a.group); },
                      [](const py::tuple& t) {
                        return pp::Action{op_from_text(t[1].cast<std::string>()), t[0].cast<std::int32_t>(),
                                          t[2].cast<std::int32_t>(), t[3].cast<std::uint32_t>()};
                      }));

  m.def(
      "parse_action",
      [](const std::string& text) -> py::object {
        const std::vector<pp::Action> actions = pp::parse_pytorch_action(text);
        if (actions.size() == 1 && !pp::detail::trimmed(text).starts_with('(')) return py::cast(actions.front());
        py::tuple out(actions.size());
        for (std::size_t i = 0; i < actions.size(); ++i) out[i] = py::cast(actions[i]);
        return out;
      },
      py::arg("text"),
      "Reads one PyTorch action string: '0F3', '1I2', '2SEND_F3' return an Action; an overlapped pair\n"
      "'(0F7;7B3)OVERLAP_F_B' returns a tuple of its sub-actions (two compute actions share group 1).\n"
      "Raises ppsched.Error for anything else, PyTorch's UNSHARD/RESHARD/REDUCE_GRAD included.");

  // ------------------------------------------------------------------ Schedule
  py::class_<pp::Schedule>(m, "Schedule",
                           "A plain value: the placement of virtual stages on ranks and one ordered program of\n"
                           "actions per rank. `placement` and `programs` return copies: assign a whole new list\n"
                           "to change them.")
      .def(py::init([](std::vector<std::vector<pp::Action>> programs, std::vector<std::int32_t> placement,
                       std::int32_t microbatches, std::string name, std::optional<std::int32_t> ranks,
                       std::optional<bool> split_backward) {
             pp::Schedule s;
             s.name = std::move(name);
             s.ranks = ranks ? *ranks : static_cast<std::int32_t>(programs.size());
             s.microbatches = microbatches;
             s.placement = std::move(placement);
             s.programs = std::move(programs);
             if (split_backward) {
               s.split_backward = *split_backward;
             } else {
               for (const auto& program : s.programs)
                 for (const pp::Action& a : program)
                   if (a.op == pp::Op::BI || a.op == pp::Op::BW) s.split_backward = true;
             }
             return s;
           }),
           py::kw_only(), py::arg("programs"), py::arg("placement"), py::arg("microbatches"),
           py::arg("name") = "schedule", py::arg("ranks") = py::none(), py::arg("split_backward") = py::none(),
           "A schedule written by hand: programs[rank] is a list of Actions, placement[stage] the stage's\n"
           "rank. ranks defaults to len(programs); split_backward to whether any I or W appears.\n"
           "Nothing is checked here: validate() says what is wrong.")
      .def_readwrite("name", &pp::Schedule::name)
      .def_readwrite("ranks", &pp::Schedule::ranks)
      .def_readwrite("microbatches", &pp::Schedule::microbatches)
      .def_readwrite("split_backward", &pp::Schedule::split_backward)
      .def_property(
          "placement", [](const pp::Schedule& s) { return s.placement; },
          [](pp::Schedule& s, std::vector<std::int32_t> p) { s.placement = std::move(p); }, "placement[stage] = rank")
      .def_property(
          "programs", [](const pp::Schedule& s) { return s.programs; },
          [](pp::Schedule& s, std::vector<std::vector<pp::Action>> p) { s.programs = std::move(p); },
          "programs[rank] = the rank's actions in issue order")
      .def_property_readonly("stages", &pp::Schedule::stages, "virtual stages: len(placement)")
      .def_property_readonly("lowered", [](const pp::Schedule& s) { return pp::is_lowered(s); },
                             "whether it holds communication (SEND/RECV)")
      .def("rank_of", &pp::Schedule::rank_of, py::arg("stage"))
      .def("__eq__", [](const pp::Schedule& a, const pp::Schedule& b) { return a == b; }, py::is_operator())
      .def("__repr__", &schedule_repr)
      .def("__str__",
           [](const pp::Schedule& s) {
             std::ostringstream out;
             out << s;
             return out.str();
           })
      .def("__copy__", [](const pp::Schedule& s) { return s; })
      .def("__deepcopy__", [](const pp::Schedule& s, const py::object&) { return s; }, py::arg("memo"))
      .def(py::pickle(
          [](const pp::Schedule& s) {
            return py::make_tuple(s.name, s.ranks, s.microbatches, s.placement, s.programs, s.split_backward);
          },
          [](const py::tuple& t) {
            if (t.size() != 6) throw py::value_error("Schedule: bad pickle state");
            pp::Schedule s;
            s.name = t[0].cast<std::string>();
            s.ranks = t[1].cast<std::int32_t>();
            s.microbatches = t[2].cast<std::int32_t>();
            s.placement = t[3].cast<std::vector<std::int32_t>>();
            s.programs = t[4].cast<std::vector<std::vector<pp::Action>>>();
            s.split_backward = t[5].cast<bool>();
            return s;
          }));

  // ------------------------------------------------------------------ families
  py::class_<pp::FamilyInfo>(m, "Family", "A schedule family: its rule, its summary and its properties as data.")
      .def_property_readonly("name", [](const pp::FamilyInfo& f) { return std::string(f.name); })
      .def_property_readonly("rule", [](const pp::FamilyInfo& f) { return std::string(f.rule); },
                             "the requests it accepts, in one line")
      .def_property_readonly("summary", [](const pp::FamilyInfo& f) { return std::string(f.summary); })
      .def_property_readonly("placement",
                             [](const pp::FamilyInfo& f) { return std::string(pp::placement_kind_name(f.placement)); },
                             "'one stage per rank', 'looped' or 'v-shape'")
      .def_property_readonly("chunks", [](const pp::FamilyInfo& f) { return f.chunks; },
                             "chunks (virtual stages) per rank it is built with; 0 when it takes any number")
      .def_property_readonly("split_backward", [](const pp::FamilyInfo& f) { return f.split_backward; })
      .def_property_readonly("training", [](const pp::FamilyInfo& f) { return f.training; })
      .def_property_readonly("overlapped_pairs", [](const pp::FamilyInfo& f) { return f.overlapped_pairs; })
      .def_property_readonly(
          "bubble_formula",
          [](const pp::FamilyInfo& f) -> std::optional<std::string> {
            if (f.bubble == nullptr) return std::nullopt;
            return std::string(f.bubble->formula);
          },
          "the literature's idle time per rank, or None")
      .def("chunks_for", &pp::FamilyInfo::chunks_for, py::arg("wanted"),
           "The chunks per rank to build it with when the caller would like `wanted`.")
      .def(
          "accepts",
          [](const pp::FamilyInfo& f, std::int32_t ranks, std::int32_t microbatches, std::optional<std::int32_t> chunks) {
            return f.accepts({ranks, microbatches, chunks_or_default(f, chunks)});
          },
          py::kw_only(), py::arg("ranks"), py::arg("microbatches"), py::arg("chunks") = py::none(),
          "Whether make_schedule would build it (nothing is built).")
      .def(
          "why_not",
          [](const pp::FamilyInfo& f, std::int32_t ranks, std::int32_t microbatches, std::optional<std::int32_t> chunks) {
            return f.why_not({ranks, microbatches, chunks_or_default(f, chunks)});
          },
          py::kw_only(), py::arg("ranks"), py::arg("microbatches"), py::arg("chunks") = py::none(),
          "The message make_schedule would raise, or '' when it accepts the request.")
      .def("__repr__",
           [](const pp::FamilyInfo& f) {
             return concat("Family(name='", f.name, "', rule='", f.rule, "', chunks=", f.chunks, ")");
           })
      .def("__eq__", [](const pp::FamilyInfo& a, const pp::FamilyInfo& b) { return a.name == b.name; },
           py::is_operator())
      .def("__hash__", [](const pp::FamilyInfo& f) { return py::hash(py::str(std::string(f.name))); });

  m.def(
      "families",
      [] {
        py::list out;
        for (const pp::FamilyInfo& f : pp::schedule_families) out.append(py::cast(&f, py::return_value_policy::reference));
        return out;
      },
      "Every schedule family, in the library's order.");
  m.def(
      "family", [](const std::string& name) { return &pp::family_info(name); }, py::arg("name"),
      py::return_value_policy::reference,
      "The family of that name: canonical ('zb-h1'), any case, '-' or '_' optional, or PyTorch's class\n"
      "name ('Interleaved1F1B'). Raises ppsched.Error listing the names otherwise.");
  m.def(
      "family_names",
      [] {
        std::vector<std::string> out;
        for (std::string_view n : pp::family_names()) out.emplace_back(n);
        return out;
      },
      "The canonical family names.");

  m.def(
      "make_schedule",
      [](const std::string& family, std::int32_t ranks, std::int32_t microbatches, std::optional<std::int32_t> chunks) {
        const pp::FamilyInfo& f = pp::family_info(family);
        return pp::make_schedule(family, {ranks, microbatches, chunks_or_default(f, chunks)});
      },
      py::arg("family"), py::kw_only(), py::arg("ranks"), py::arg("microbatches"), py::arg("chunks") = py::none(),
      "The family's compute-only schedule for `ranks` ranks and `microbatches` micro-batches.\n"
      "chunks: virtual stages per rank; None: the family's own (two for the looped families that\n"
      "take any number). Raises ppsched.Error stating the family's rule when it refuses the request.");

  // The placements, with the size check of a schedule request first: the C++ helpers allocate
  // p*v entries unchecked, and Python may pass sizes up to 2**31 - 1 (the check keeps them within
  // what a generator builds, a placement of at most 2**26 / 3 stages).
  m.def(
      "one_stage_per_rank_placement",
      [](std::int32_t ranks) {
        pp::detail::check_request_sizes("one_stage_per_rank_placement", pp::ScheduleRequest{ranks, 1, 1});
        return pp::one_stage_per_rank_placement(ranks);
      },
      py::arg("ranks"), "Stage s on rank s (GPipe, 1F1B, ZB-H1, ZB-H2).");
  m.def(
      "looped_placement",
      [](std::int32_t ranks, std::int32_t chunks) {
        pp::detail::check_request_sizes("looped_placement", pp::ScheduleRequest{ranks, 1, chunks});
        return pp::looped_placement(ranks, chunks);
      },
      py::arg("ranks"), py::arg("chunks"),
      "Stage c*ranks + r on rank r: Megatron's virtual pipeline (interleaved 1F1B, looped BFS).");
  m.def(
      "v_shape_placement",
      [](std::int32_t ranks) {
        pp::detail::check_request_sizes("v_shape_placement", pp::ScheduleRequest{ranks, 1, 2});
        return pp::v_shape_placement(ranks);
      },
      py::arg("ranks"), "Two stages per rank in a V: stage s on rank s for s < p, on 2p-1-s after (ZB-V, V-Half, V-Min, DualPipeV).");

  // ------------------------------------------------------------------ PyTorch's CSV and actions
  m.def(
      "to_pytorch_csv",
      [](const pp::Schedule& s, bool comms, bool groups, bool bookkeeping) {
        return pp::to_pytorch_csv(in_csv_form(s, comms), csv_options(groups, "\r\n", bookkeeping));
      },
      py::arg("schedule"), py::kw_only(), py::arg("comms") = false, py::arg("groups") = true,
      py::arg("bookkeeping") = true,
      "The schedule as PyTorch's pipelining CSV (one row per rank, \\r\\n line ends as Python's csv\n"
      "writes). comms=False: the compute_only format (communication left out); comms=True: the\n"
      "compute_comms format, the schedule lowered with SEND/RECV (unless it already is).\n"
      "groups: append ppsched's '#group' to grouped communication cells (PyTorch ignores it).\n"
      "bookkeeping (compute_comms only): add the cells PyTorch's runtime requires of such a file, one\n"
      "WAIT_SEND_F / WAIT_SEND_B per send and REDUCE_GRAD, WAIT_REDUCE_GRAD per stage after its last\n"
      "backward (where PyTorch scales the gradients by 1/m), so that torch 2.15 runs it as written;\n"
      "False for a PyTorch whose parser lacks them. from_pytorch_csv skips these cells.\n"
      "Memory actions (R, OFFLOAD, RELOAD) are written as they are; PyTorch refuses them, so\n"
      "strip_memory_actions() a schedule first.");
  m.def(
      "to_pytorch_actions",
      [](const pp::Schedule& s, bool comms, bool groups, bool bookkeeping) {
        const pp::Schedule form = in_csv_form(s, comms);
        // The CSV's cells are the action strings: no cell the writer makes holds a comma.
        const std::string text = pp::to_pytorch_csv(form, csv_options(groups, "\n", bookkeeping));
        py::dict out;
        std::size_t begin = 0;
        for (std::int32_t r = 0; r < static_cast<std::int32_t>(form.programs.size()); ++r) {
          const std::size_t end = text.find('\n', begin);
          const std::string_view row = std::string_view(text).substr(begin, end - begin);
          py::list cells;
          std::size_t at = 0;
          while (!row.empty() && at <= row.size()) {
            const std::size_t comma = std::min(row.find(',', at), row.size());
            cells.append(py::str(std::string(row.substr(at, comma - at))));
            at = comma + 1;
          }
          out[py::int_(r)] = cells;
          begin = end + 1;
        }
        return out;
      },
      py::arg("schedule"), py::kw_only(), py::arg("comms") = false, py::arg("groups") = true,
      py::arg("bookkeeping") = true,
      "rank -> the rank's PyTorch action strings, as to_pytorch_csv writes them (bookkeeping cells included).");
  m.def(
      "from_pytorch_csv",
      [](const std::string& text, std::optional<std::vector<std::int32_t>> placement, std::int32_t microbatches,
         const std::string& name, const std::string& source) {
        return pp::from_pytorch_csv(text, read_options(std::move(placement), microbatches, name, source));
      },
      py::arg("text"), py::kw_only(), py::arg("placement") = py::none(), py::arg("microbatches") = 0,
      py::arg("name") = "csv", py::arg("source") = "<text>",
      "Reads PyTorch's pipelining CSV (either format). placement: stage -> rank; None infers it from\n"
      "the rows. microbatches: 0 infers one more than the largest seen. PyTorch's UNSHARD, RESHARD\n"
      "and REDUCE_GRAD are skipped. Raises ppsched.Error naming the row and column of a bad cell.");
  m.def(
      "from_pytorch_actions",
      [](const py::object& actions, std::optional<std::vector<std::int32_t>> placement, std::int32_t microbatches,
         const std::string& name) {
        // rank -> action strings, as a dict or a list of rows; the rows become one CSV text.
        std::map<std::int64_t, std::vector<std::string>> rows;
        if (py::isinstance<py::dict>(actions)) {
          for (const auto& [rank, cells] : actions.cast<py::dict>()) {
            const auto r = rank.cast<std::int64_t>();
            if (r < 0 || r > 1'000'000)
              pp::detail::fail({"from_pytorch_actions", concat("rank ", r, " is out of range"), "", "ranks count from 0"});
            rows[r] = cells.cast<std::vector<std::string>>();
          }
        } else {
          const auto list = actions.cast<std::vector<std::vector<std::string>>>();
          for (std::size_t r = 0; r < list.size(); ++r) rows[static_cast<std::int64_t>(r)] = list[r];
        }
        std::string text;
        const std::int64_t count = rows.empty() ? 0 : rows.rbegin()->first + 1;
        for (std::int64_t r = 0; r < count; ++r) {
          const auto it = rows.find(r);
          if (it != rows.end()) {
            for (std::size_t i = 0; i < it->second.size(); ++i) {
              check_action_text(it->second[i], concat("from_pytorch_actions, rank ", r));
              if (i != 0) text += ',';
              text += it->second[i];
            }
          }
          text += '\n';
        }
        return pp::from_pytorch_csv(text, read_options(std::move(placement), microbatches, name, "<actions>"));
      },
      py::arg("actions"), py::kw_only(), py::arg("placement") = py::none(), py::arg("microbatches") = 0,
      py::arg("name") = "actions",
      "A schedule from rank -> PyTorch action strings (a dict, or a list of rows), read as\n"
      "from_pytorch_csv reads the same cells.");
  m.def(
      "save_pytorch_csv",
      [](const pp::Schedule& s, const std::string& path, bool comms, bool groups, bool bookkeeping) {
        pp::save_pytorch_csv(path, in_csv_form(s, comms), csv_options(groups, "\r\n", bookkeeping));
      },
      py::arg("schedule"), py::arg("path"), py::kw_only(), py::arg("comms") = false, py::arg("groups") = true,
      py::arg("bookkeeping") = true,
      "Writes to_pytorch_csv's text to a file.");
  m.def(
      "load_pytorch_csv",
      [](const std::string& path, std::optional<std::vector<std::int32_t>> placement, std::int32_t microbatches) {
        pp::CsvReadOptions o;
        o.microbatches = microbatches;
        if (placement) o.placement = std::move(*placement);
        return pp::load_pytorch_csv(path, o);
      },
      py::arg("path"), py::kw_only(), py::arg("placement") = py::none(), py::arg("microbatches") = 0,
      "Reads a PyTorch pipelining CSV file; the file's stem names the schedule.");

  m.def("strip_memory_actions", &pp::strip_memory_actions, py::arg("schedule"),
        "The schedule without R, OFFLOAD and RELOAD (what PyTorch's runtime can run).");
  m.def("strip_communication", &pp::strip_communication, py::arg("schedule"),
        "The compute-only schedule a lowered one came from.");
  m.def("is_lowered", &pp::is_lowered, py::arg("schedule"));

  // ------------------------------------------------------------------ lowering
  m.def(
      "lower",
      [](const pp::Schedule& s, const pp::CostModel* costs, bool group) {
        pp::LowerOptions o = costs != nullptr ? pp::lower_options_for(*costs, s.stages(), s.microbatches) : pp::LowerOptions{};
        o.group_simultaneous = group;
        py::gil_scoped_release release;
        return pp::lower(s, o).release();
      },
      py::arg("schedule"), py::kw_only(), py::arg("costs") = py::none(), py::arg("group") = true,
      "The schedule with SEND/RECV inserted where each rank must post them, safe under rendezvous\n"
      "communication; transfers that must progress together share a group. costs: a CostModel whose\n"
      "compute times decide the order (None: unit times). A schedule with communication already is\n"
      "returned as it is. Raises ppsched.Error naming the problems of an invalid schedule.");

  // ------------------------------------------------------------------ validation
  py::class_<pp::Problem>(m, "Problem", "One problem validate() found: its kind, place and message (with the fix).")
      .def_property_readonly("kind", [](const pp::Problem& p) { return std::string(pp::problem_kind_name(p.kind)); })
      .def_readonly("rank", &pp::Problem::rank, "-1 when not about one rank")
      .def_readonly("position", &pp::Problem::position, "index in the rank's program, -1 when none")
      .def_property_readonly(
          "action", [](const pp::Problem& p) -> std::optional<pp::Action> {
            if (p.position < 0) return std::nullopt;
            return p.action;
          })
      .def_readonly("message", &pp::Problem::message)
      .def("__str__", [](const pp::Problem& p) { return p.message; })
      .def("__repr__", [](const pp::Problem& p) {
        return concat("Problem(kind='", pp::problem_kind_name(p.kind), "', rank=", p.rank, ", position=", p.position,
                      ", message=", py::repr(py::str(p.message)).cast<std::string>(), ")");
      });

  py::class_<pp::RankMemory>(m, "RankMemory", "Peak activation memory of one rank.")
      .def_readonly("peak_activations", &pp::RankMemory::peak_activations, "stored stage activations at the peak")
      .def_readonly("peak_bytes", &pp::RankMemory::peak_bytes, "bytes, where the costs give activation sizes; else 0")
      .def_readonly("peak_in_flight", &pp::RankMemory::peak_in_flight, "micro-batches whose F is done and B is not")
      .def_readonly("peak_microbatches", &pp::RankMemory::peak_microbatches, "in M_B (one micro-batch's activations)")
      .def("__repr__", [](const pp::RankMemory& r) {
        return concat("RankMemory(peak_activations=", float_repr(r.peak_activations),
                      ", peak_microbatches=", float_repr(r.peak_microbatches), ", peak_in_flight=", r.peak_in_flight,
                      ", peak_bytes=", float_repr(r.peak_bytes), ")");
      });

  py::class_<pp::ValidationReport>(m, "Validation",
                                   "What validate() found: `ok`, every problem (a deadlock's message names each stuck\n"
                                   "action and what it waits for) and the peak memory per rank. bool(v) is v.ok.")
      .def_property_readonly("ok", &pp::ValidationReport::ok)
      .def_property_readonly("message", [](const pp::ValidationReport& r) { return pp::to_string(r); },
                             "the report in words, as the C++ library prints it")
      .def_readonly("problems", &pp::ValidationReport::problems)
      .def_readonly("unlisted_problems", &pp::ValidationReport::unlisted_problems)
      .def_property_readonly("deadlock",
                             [](const pp::ValidationReport& r) { return r.has(pp::ProblemKind::deadlock); })
      .def_readonly("lowered", &pp::ValidationReport::lowered)
      .def_readonly("deadlock_checked", &pp::ValidationReport::deadlock_checked)
      .def_readonly("memory", &pp::ValidationReport::memory, "per rank")
      .def_readonly("stage_peak_in_flight", &pp::ValidationReport::stage_peak_in_flight, "per stage")
      .def("__bool__", &pp::ValidationReport::ok)
      .def("__str__", [](const pp::ValidationReport& r) { return pp::to_string(r); })
      .def("__repr__", [](const pp::ValidationReport& r) {
        return concat("Validation(ok=", r.ok() ? "True" : "False", ", problems=", r.problems.size() + r.unlisted_problems,
                      ", deadlock=", r.has(pp::ProblemKind::deadlock) ? "True" : "False", ")");
      });

  m.def(
      "validate",
      [](const pp::Schedule& s, const pp::CostModel* costs, bool check_deadlock, double weight_fraction,
         std::size_t max_problems) {
        pp::ValidateOptions o;
        if (costs != nullptr) {
          o.memory = pp::memory_model_for(*costs, s.stages());
        } else {
          o.memory.weight_fraction = weight_fraction;
        }
        o.check_deadlock = check_deadlock;
        o.max_problems = max_problems;
        py::gil_scoped_release release;
        return pp::validate(s, o);
      },
      py::arg("schedule"), py::kw_only(), py::arg("costs") = py::none(), py::arg("check_deadlock") = true,
      py::arg("weight_fraction") = 0.5, py::arg("max_problems") = 1000,
      "Proves a schedule (compute-only or lowered) safe, or says what is wrong: placement, ranges, each\n"
      "(stage, micro-batch) computed once per kind, dependency order, communication, and deadlock\n"
      "freedom under rendezvous for every timing. costs: a CostModel for the memory figures in bytes.\n"
      "Never raises for a bad schedule: the result lists the problems.");
}

}  // namespace ppsched_py
