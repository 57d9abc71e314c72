// `nrtprof diff A B [--format text|csv|json] [--limit N]`: two captures side by side, row by
// row of their key_averages tables (framework ops, and runtime calls outside any op): the
// calls, the self device (NEURON) time, the device time per call (the summary's "NEURON time
// avg": all the device time under the row, so a step's or a module's own cost shows), and the
// change of the self device time from A to B, sorted by how much it is (largest first). The
// totals close the table. Times are written as the summary table writes them.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/summary_file.h"
#include "common/json_text.h"
#include "common/terminal_text.h"
#include "trace/summary.h"

ABSL_DECLARE_FLAG(std::string, format);  // command_summary.cc
ABSL_DECLARE_FLAG(int, limit);           // command_summary.cc

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof diff: %s\n", line.c_str());
  return code;
}

struct DiffRow {
  std::string name;
  uint64_t calls_a = 0, calls_b = 0;
  uint64_t device_a = 0, device_b = 0;  // self NEURON, ns
  uint64_t total_a = 0, total_b = 0;    // NEURON total (under the row), ns
  uint64_t cpu_a = 0, cpu_b = 0;        // self CPU, ns
  int64_t change() const { return static_cast<int64_t>(device_b) - static_cast<int64_t>(device_a); }
};

// The device time per call as the summary's "NEURON time avg" says it, or "-" without calls.
std::string PerCall(uint64_t ns, uint64_t calls) {
  return calls == 0 ? "-" : daemon::FormatDuration(ns / calls);
}

// "+2.250ms", "-6.616ms", "0.000us".
std::string Change(int64_t ns) {
  const uint64_t size = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  return (ns > 0 ? "+" : ns < 0 ? "-" : "") + daemon::FormatDuration(size);
}

std::string Ratio(uint64_t a, uint64_t b) {
  return a == 0 ? (b == 0 ? "-" : "new") : absl::StrFormat("%.2fx", static_cast<double>(b) / a);
}

}  // namespace

int DiffCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 3) {
    return Fail("usage: nrtprof diff CAPTURE_A CAPTURE_B [--format text|csv|json] [--limit N]", 2);
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "text" && format != "csv" && format != "json") {
    return Fail(absl::StrCat("--format '", format, "' is not text, csv or json"), 2);
  }
  const int limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return Fail("--limit must not be negative", 2);
  absl::StatusOr<daemon::Summary> a = ReadCaptureSummary(args[1]);
  if (!a.ok()) return Fail(std::string(a.status().message()));
  absl::StatusOr<daemon::Summary> b = ReadCaptureSummary(args[2]);
  if (!b.ok()) return Fail(std::string(b.status().message()));

  std::map<std::string, DiffRow> by_name;
  for (const daemon::SummaryRow& r : a->rows) {
    DiffRow& d = by_name[r.name];
    d.name = r.name;
    d.calls_a = r.calls;
    d.device_a = r.self_device_ns;
    d.total_a = r.device_total_ns;
    d.cpu_a = r.self_cpu_ns;
  }
  for (const daemon::SummaryRow& r : b->rows) {
    DiffRow& d = by_name[r.name];
    d.name = r.name;
    d.calls_b = r.calls;
    d.device_b = r.self_device_ns;
    d.total_b = r.device_total_ns;
    d.cpu_b = r.self_cpu_ns;
  }
  std::vector<DiffRow> rows;
  for (auto& [name, row] : by_name) rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const DiffRow& x, const DiffRow& y) {
    const int64_t cx = std::llabs(x.change()), cy = std::llabs(y.change());
    return cx != cy ? cx > cy : x.name < y.name;
  });
  if (limit > 0 && rows.size() > static_cast<size_t>(limit)) rows.resize(limit);

  std::string out;
  if (format == "json") {
    absl::StrAppend(&out, "{\n  \"a\": ", JsonString(a->capture_id), ",\n  \"b\": ",
                    JsonString(b->capture_id), ",\n  \"rows\": [");
    for (size_t i = 0; i < rows.size(); ++i) {
      const DiffRow& r = rows[i];
      absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "    {\"name\": ", JsonString(r.name),
                      ", \"calls_a\": ", r.calls_a, ", \"calls_b\": ", r.calls_b,
                      ", \"self_device_ns_a\": ", r.device_a, ", \"self_device_ns_b\": ",
                      r.device_b, ", \"device_total_ns_a\": ", r.total_a,
                      ", \"device_total_ns_b\": ", r.total_b, ", \"self_cpu_ns_a\": ", r.cpu_a,
                      ", \"self_cpu_ns_b\": ", r.cpu_b, ", \"self_device_change_ns\": ", r.change(),
                      "}");
    }
    absl::StrAppend(&out, "\n  ],\n  \"self_device_total_ns_a\": ", a->self_device_total_ns,
                    ",\n  \"self_device_total_ns_b\": ", b->self_device_total_ns,
                    ",\n  \"self_cpu_total_ns_a\": ", a->self_cpu_total_ns,
                    ",\n  \"self_cpu_total_ns_b\": ", b->self_cpu_total_ns, "\n}\n");
  } else if (format == "csv") {
    out = "name,calls_a,calls_b,self_device_ns_a,self_device_ns_b,self_device_change_ns,"
          "self_cpu_ns_a,self_cpu_ns_b,device_total_ns_a,device_total_ns_b\n";
    for (const DiffRow& r : rows) {
      absl::StrAppend(&out, daemon::CsvField(r.name), ",", r.calls_a, ",", r.calls_b, ",", r.device_a,
                      ",", r.device_b, ",", r.change(), ",", r.cpu_a, ",", r.cpu_b, ",", r.total_a,
                      ",", r.total_b, "\n");
    }
  } else {
    size_t width = 4;
    // Names are what the programs sent, any bytes: visible text only (terminal_text.h).
    for (const DiffRow& r : rows) {
      width = std::max(width, std::min<size_t>(TerminalText(r.name).size(), 55));
    }
    std::string rule = absl::StrCat(std::string(width, '-'), "  ", std::string(8, '-'), "  ",
                                    std::string(8, '-'));
    for (int column = 0; column < 5; ++column) absl::StrAppend(&rule, "  ", std::string(13, '-'));
    absl::StrAppend(&out, "A: ", TerminalText(a->capture_id), "   B: ", TerminalText(b->capture_id),
                    "\n", rule, "\n");
    absl::StrAppend(&out, absl::StrFormat("%*s  %8s  %8s  %13s  %13s  %13s  %13s  %13s\n",
                                          static_cast<int>(width), "Name", "Calls A", "Calls B",
                                          "Self NEURON A", "Self NEURON B", "NEURON avg A",
                                          "NEURON avg B", "Self change"),
                    rule, "\n");
    for (const DiffRow& r : rows) {
      const std::string name = TerminalTextClipped(r.name, width);
      absl::StrAppend(&out, absl::StrFormat("%*s  %8d  %8d  %13s  %13s  %13s  %13s  %13s\n",
                                            static_cast<int>(width), name, r.calls_a, r.calls_b,
                                            daemon::FormatDuration(r.device_a),
                                            daemon::FormatDuration(r.device_b),
                                            PerCall(r.total_a, r.calls_a),
                                            PerCall(r.total_b, r.calls_b), Change(r.change())));
    }
    absl::StrAppend(
        &out, rule, "\n", "Self NEURON time total: ", daemon::FormatDuration(a->self_device_total_ns),
        " -> ", daemon::FormatDuration(b->self_device_total_ns), " (",
        Change(static_cast<int64_t>(b->self_device_total_ns) -
               static_cast<int64_t>(a->self_device_total_ns)),
        ", ", Ratio(a->self_device_total_ns, b->self_device_total_ns), ")\n",
        "Self CPU time total: ", daemon::FormatDuration(a->self_cpu_total_ns), " -> ",
        daemon::FormatDuration(b->self_cpu_total_ns), " (",
        Ratio(a->self_cpu_total_ns, b->self_cpu_total_ns), ")\n");
  }
  fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace nrtprof::cli
