// The timeline's statistics and writers: ASCII, Chrome trace (chrome://tracing, Perfetto), SVG,
// the timeline CSV both ways, and the comparison of a measured timeline with a predicted one.
// Each writer takes a Timeline or a Simulation (its timeline).
#include "common.hpp"

#include <fstream>
#include <string>
#include <utility>

#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/ascii.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/compare.hpp"
#include "ppsched/trace/csv.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/svg.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched_py {
namespace {

namespace pp = ppsched;
using pp::detail::concat;

void write_text(const std::string& path, const std::string& text, std::string_view what) {
  std::ofstream out(path, std::ios::binary);
  if (!out)
    pp::detail::fail({concat(what, " '", path, "'"), "cannot open the file for writing", "",
              "check that the directory exists and is writable"});
  out << text;
  out.flush();
  if (!out)
    pp::detail::fail({concat(what, " '", path, "'"), "writing the file failed", "",
              "check the free space and permissions of the directory"});
}

pp::ChromeTraceOptions chrome_options(std::string title, double microseconds_per_unit, std::string process_label) {
  pp::ChromeTraceOptions o;
  o.title = std::move(title);
  o.microseconds_per_unit = microseconds_per_unit;
  o.process_label = std::move(process_label);
  return o;
}

pp::SvgOptions svg_options(std::string title, double width, double row_height, bool microbatch_labels) {
  pp::SvgOptions o;
  o.title = std::move(title);
  o.width = width;
  o.row_height = row_height;
  o.microbatch_labels = microbatch_labels;
  return o;
}

}  // namespace

void bind_trace(py::module_& m) {
  py::class_<pp::RankStats>(m, "RankStats", "One rank's figures read from a timeline.")
      .def_readonly("rank", &pp::RankStats::rank)
      .def_readonly("actions", &pp::RankStats::actions)
      .def_readonly("first_start", &pp::RankStats::first_start)
      .def_readonly("last_end", &pp::RankStats::last_end)
      .def_readonly("span", &pp::RankStats::span)
      .def_readonly("busy", &pp::RankStats::busy)
      .def_readonly("comm_wait", &pp::RankStats::comm_wait)
      .def_readonly("idle", &pp::RankStats::idle)
      .def_readonly("bubble_fraction", &pp::RankStats::bubble_fraction)
      .def_readonly("span_bubble_fraction", &pp::RankStats::span_bubble_fraction)
      .def("__repr__", [](const pp::RankStats& r) {
        return concat("RankStats(rank=", r.rank, ", busy=", float_repr(r.busy), ", idle=", float_repr(r.idle),
                      ", bubble_fraction=", float_repr(r.bubble_fraction), ")");
      });

  py::class_<pp::TimelineStats>(m, "TimelineStats", "A timeline's makespan, busy and idle time, bubbles, per rank.")
      .def_readonly("ranks", &pp::TimelineStats::ranks)
      .def_readonly("unit", &pp::TimelineStats::unit)
      .def_readonly("spans", &pp::TimelineStats::spans)
      .def_readonly("origin", &pp::TimelineStats::origin)
      .def_readonly("finish", &pp::TimelineStats::finish)
      .def_readonly("makespan", &pp::TimelineStats::makespan)
      .def_readonly("total_busy", &pp::TimelineStats::total_busy)
      .def_readonly("total_comm_wait", &pp::TimelineStats::total_comm_wait)
      .def_readonly("total_idle", &pp::TimelineStats::total_idle)
      .def_readonly("bubble_fraction", &pp::TimelineStats::bubble_fraction)
      .def_readonly("ideal_time", &pp::TimelineStats::ideal_time)
      .def_readonly("bubble_vs_ideal", &pp::TimelineStats::bubble_vs_ideal)
      .def_readonly("per_rank", &pp::TimelineStats::per_rank)
      .def("count", [](const pp::TimelineStats& s, const std::string& op) { return s.count(op_from_text(op)); },
           py::arg("op"), "spans of this operation")
      .def("__str__", [](const pp::TimelineStats& s) { return pp::to_string(s); })
      .def("__repr__", [](const pp::TimelineStats& s) {
        return concat("TimelineStats(ranks=", s.ranks, ", makespan=", float_repr(s.makespan),
                      ", bubble_fraction=", float_repr(s.bubble_fraction), ")");
      });

  py::class_<pp::TimelineComparison>(m, "TimelineComparison", "A measured timeline set beside a predicted one.")
      .def("__str__", [](const pp::TimelineComparison& c) { return pp::to_string(c); })
      .def("__repr__", [](const pp::TimelineComparison& c) { return pp::to_string(c); });

  // Each takes a Timeline; a Simulation converts to its timeline (Timeline(simulation), below).
  m.def("summarize", [](const pp::Timeline& t) { return pp::summarize(t); }, py::arg("timeline"), "The timeline's statistics (makespan, busy, idle, bubble fraction, per rank).");
  m.def("to_ascii", [](const pp::Timeline& t, std::int32_t columns, std::int32_t max_columns, bool microbatch_digits, bool comm_rows,
         bool ruler, bool legend) {
        pp::AsciiOptions o;
        o.columns = columns;
        o.max_columns = max_columns;
        o.microbatch_digits = microbatch_digits;
        o.comm_rows = comm_rows;
        o.ruler = ruler;
        o.legend = legend;
        return pp::to_ascii(t, o);
      }, py::arg("timeline"), py::kw_only(), py::arg("columns") = 0, py::arg("max_columns") = 120, py::arg("microbatch_digits") = false, py::arg("comm_rows") = false, py::arg("ruler") = true, py::arg("legend") = true, "The timeline drawn in text, one line per rank.");
  m.def("to_chrome_trace", [](const pp::Timeline& t, std::string title, double microseconds_per_unit, std::string process_label) {
        return pp::to_chrome_trace(t, chrome_options(std::move(title), microseconds_per_unit, std::move(process_label)));
      }, py::arg("timeline"), py::kw_only(), py::arg("title") = "", py::arg("microseconds_per_unit") = 0.0, py::arg("process_label") = "rank", "The timeline as Chrome trace JSON (chrome://tracing, ui.perfetto.dev). microseconds_per_unit: 0\n"
      "derives it from the timeline's unit.");
  m.def(
      "write_chrome_trace",
      [](const pp::Timeline& t, const std::string& path, std::string title, double microseconds_per_unit,
         std::string process_label) {
        write_text(path,
                   pp::to_chrome_trace(t, chrome_options(std::move(title), microseconds_per_unit, std::move(process_label))),
                   "chrome trace");
      },
      py::arg("timeline"), py::arg("path"), py::kw_only(), py::arg("title") = "", py::arg("microseconds_per_unit") = 0.0,
      py::arg("process_label") = "rank", "Writes to_chrome_trace's JSON to a file.");
  m.def("to_svg", [](const pp::Timeline& t, std::string title, double width, double row_height, bool microbatch_labels) {
        return pp::to_svg(t, svg_options(std::move(title), width, row_height, microbatch_labels));
      }, py::arg("timeline"), py::kw_only(), py::arg("title") = "", py::arg("width") = 1600.0, py::arg("row_height") = 30.0, py::arg("microbatch_labels") = true, "The timeline as an SVG picture.");
  m.def(
      "write_svg",
      [](const pp::Timeline& t, const std::string& path, std::string title, double width, double row_height,
         bool microbatch_labels) {
        write_text(path, pp::to_svg(t, svg_options(std::move(title), width, row_height, microbatch_labels)), "SVG");
      },
      py::arg("timeline"), py::arg("path"), py::kw_only(), py::arg("title") = "", py::arg("width") = 1600.0,
      py::arg("row_height") = 30.0, py::arg("microbatch_labels") = true, "Writes to_svg's picture to a file.");
  m.def("to_timeline_csv", [](const pp::Timeline& t) { return pp::to_timeline_csv(t); }, py::arg("timeline"), "The timeline as ppsched's timeline CSV (parse_timeline_csv reads it back).");
  m.def(
      "parse_timeline_csv", [](const std::string& text, const std::string& source) { return pp::parse_timeline_csv(text, source); },
      py::arg("text"), py::kw_only(), py::arg("source") = "<string>", "Reads ppsched's timeline CSV.");
  m.def(
      "load_timeline_csv", [](const std::string& path) { return pp::load_timeline_csv(path); }, py::arg("path"),
      "Reads ppsched's timeline CSV from a file.");
  m.def(
      "compare_timelines",
      [](const pp::Timeline& measured, const pp::Timeline& predicted) { return pp::compare(measured, predicted); },
      py::arg("measured"), py::arg("predicted"),
      "Sets a measured timeline beside a predicted one: makespan, busy and idle per rank, per action.");

  // A Simulation where a Timeline is asked for: the writers above take sim results directly.
  py::implicitly_convertible<pp::SimResult, pp::Timeline>();
}

}  // namespace ppsched_py
