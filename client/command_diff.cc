// `nrtprof diff A B [--format text|csv|json] [--limit N]`: two captures side by side, row by
// row of their key_averages tables (framework ops, and runtime calls outside any op): the
// calls, the self device (NEURON) time, the device time per call, and the change from A to B,
// sorted by how much the change is (largest first). The totals close the table.
#include <algorithm>
#include <cmath>
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
#include "daemon/summary.h"

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
  uint64_t cpu_a = 0, cpu_b = 0;        // self CPU, ns
  int64_t change() const { return static_cast<int64_t>(device_b) - static_cast<int64_t>(device_a); }
};

// "2.355ms", "403.659us", as the summary table writes times.
std::string Duration(double ns) {
  if (std::fabs(ns) >= 1e6) return absl::StrFormat("%.3fms", ns / 1e6);
  return absl::StrFormat("%.3fus", ns / 1e3);
}

std::string PerCall(uint64_t ns, uint64_t calls) {
  return calls == 0 ? "-" : Duration(static_cast<double>(ns) / calls);
}

std::string Change(int64_t ns) { return (ns > 0 ? "+" : "") + Duration(static_cast<double>(ns)); }

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
    d.cpu_a = r.self_cpu_ns;
  }
  for (const daemon::SummaryRow& r : b->rows) {
    DiffRow& d = by_name[r.name];
    d.name = r.name;
    d.calls_b = r.calls;
    d.device_b = r.self_device_ns;
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
    absl::StrAppend(&out, "{\n  \"a\": ", daemon::JsonString(a->capture_id), ",\n  \"b\": ",
                    daemon::JsonString(b->capture_id), ",\n  \"rows\": [");
    for (size_t i = 0; i < rows.size(); ++i) {
      const DiffRow& r = rows[i];
      absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "    {\"name\": ", daemon::JsonString(r.name),
                      ", \"calls_a\": ", r.calls_a, ", \"calls_b\": ", r.calls_b,
                      ", \"self_device_ns_a\": ", r.device_a, ", \"self_device_ns_b\": ",
                      r.device_b, ", \"self_cpu_ns_a\": ", r.cpu_a, ", \"self_cpu_ns_b\": ",
                      r.cpu_b, ", \"self_device_change_ns\": ", r.change(), "}");
    }
    absl::StrAppend(&out, "\n  ],\n  \"self_device_total_ns_a\": ", a->self_device_total_ns,
                    ",\n  \"self_device_total_ns_b\": ", b->self_device_total_ns,
                    ",\n  \"self_cpu_total_ns_a\": ", a->self_cpu_total_ns,
                    ",\n  \"self_cpu_total_ns_b\": ", b->self_cpu_total_ns, "\n}\n");
  } else if (format == "csv") {
    out = "name,calls_a,calls_b,self_device_ns_a,self_device_ns_b,self_device_change_ns,"
          "self_cpu_ns_a,self_cpu_ns_b\n";
    for (const DiffRow& r : rows) {
      absl::StrAppend(&out, daemon::CsvField(r.name), ",", r.calls_a, ",", r.calls_b, ",", r.device_a,
                      ",", r.device_b, ",", r.change(), ",", r.cpu_a, ",", r.cpu_b, "\n");
    }
  } else {
    size_t width = 4;
    for (const DiffRow& r : rows) width = std::max(width, std::min<size_t>(r.name.size(), 55));
    const std::string rule = absl::StrCat(std::string(width, '-'), "  ", std::string(8, '-'), "  ",
                                          std::string(8, '-'), "  ", std::string(12, '-'), "  ",
                                          std::string(12, '-'), "  ", std::string(12, '-'), "  ",
                                          std::string(12, '-'), "  ", std::string(12, '-'));
    absl::StrAppend(&out, "A: ", a->capture_id, "   B: ", b->capture_id, "\n", rule, "\n");
    absl::StrAppend(&out, absl::StrFormat("%*s  %8s  %8s  %12s  %12s  %12s  %12s  %12s\n",
                                          static_cast<int>(width), "Name", "Calls A", "Calls B",
                                          "NEURON A", "NEURON B", "per call A", "per call B",
                                          "Change"),
                    rule, "\n");
    for (const DiffRow& r : rows) {
      std::string name = r.name.size() > width ? r.name.substr(0, width - 3) + "..." : r.name;
      absl::StrAppend(&out, absl::StrFormat("%*s  %8d  %8d  %12s  %12s  %12s  %12s  %12s\n",
                                            static_cast<int>(width), name, r.calls_a, r.calls_b,
                                            Duration(r.device_a), Duration(r.device_b),
                                            PerCall(r.device_a, r.calls_a),
                                            PerCall(r.device_b, r.calls_b), Change(r.change())));
    }
    absl::StrAppend(
        &out, rule, "\n", "Self NEURON time total: ", Duration(a->self_device_total_ns), " -> ",
        Duration(b->self_device_total_ns), " (",
        Change(static_cast<int64_t>(b->self_device_total_ns) -
               static_cast<int64_t>(a->self_device_total_ns)),
        ", ", Ratio(a->self_device_total_ns, b->self_device_total_ns), ")\n",
        "Self CPU time total: ", Duration(a->self_cpu_total_ns), " -> ",
        Duration(b->self_cpu_total_ns), " (", Ratio(a->self_cpu_total_ns, b->self_cpu_total_ns),
        ")\n");
  }
  fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace nrtprof::cli
