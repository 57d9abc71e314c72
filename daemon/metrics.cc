#include "daemon/metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/summary.h"

namespace nrtprof::daemon {
namespace {

// A label value as the exposition format wants it: backslash, double quote and newline escaped.
std::string Label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Seconds(uint64_t ns) { return absl::StrFormat("%.9f", ns / 1e9); }

void Header(std::string* out, const char* name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

}  // namespace

const std::vector<double>& Metrics::DeviceBuckets() {
  static const std::vector<double> kBuckets = {1e-5, 5e-5,   1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                               5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,  0.5,  1.0};
  return kBuckets;
}

Metrics::ModelKey Metrics::KeyOf(uint32_t pid, const std::string& executable,
                                 const std::string& model) {
  const std::string exe = Basename(executable);
  const std::pair<uint32_t, std::string> process(pid, exe);
  if (processes_.count(process) == 0) {
    if (processes_.size() >= kMaxProcessSeries) return ModelKey("other", "other", model);
    processes_[process] = true;
  }
  return ModelKey(std::to_string(pid), exe, model);
}

void Metrics::Add(const Trace& trace) {
  const Summary summary = ComputeSummary(trace);
  std::lock_guard<std::mutex> lock(mu_);
  for (const ProcessTrace& p : trace.processes) {
    for (const ApiCall& call : p.calls) {
      ++calls_[{call.name, call.status}];
      if (call.name == "nrt_execute" || call.name == "nrt_execute_repeat") {
        executions_[KeyOf(p.pid, p.executable, call.model_name.empty() ? "unknown" : call.model_name)] +=
            std::max<uint32_t>(call.repeat, 1);
      }
    }
    for (const DeviceEvent& e : p.device) {
      if (e.name != "nc_exec_running") continue;
      Histogram& h =
          device_[KeyOf(p.pid, p.executable, e.model_name.empty() ? "unknown" : e.model_name)];
      const std::vector<double>& bounds = DeviceBuckets();
      if (h.buckets.empty()) h.buckets.assign(bounds.size(), 0);
      const double s = e.duration_ns / 1e9;
      const size_t b = std::lower_bound(bounds.begin(), bounds.end(), s) - bounds.begin();
      if (b < bounds.size()) ++h.buckets[b];
      ++h.count;
      h.sum += s;
    }
  }
  for (const SummaryRow& row : summary.rows) {
    OpTimes& op = ops_[row.name];
    op.calls += row.calls;
    op.host_ns += row.self_cpu_ns;
    op.device_ns += row.self_device_ns;
  }
  uncorrelated_device_ns_ += summary.uncorrelated_device_ns;
}

std::string Metrics::Render(const nrtprof::StatusReply& status) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Header(&out, "nrtprof_runtime_calls_total", "counter", "libnrt calls, by function and status");
    for (const auto& [key, n] : calls_) {
      absl::StrAppend(&out, "nrtprof_runtime_calls_total{function=\"", Label(key.first),
                      "\",status=\"", key.second, "\"} ", n, "\n");
    }
    Header(&out, "nrtprof_model_executions_total", "counter",
           "model executions (nrt_execute), by process and model");
    for (const auto& [key, n] : executions_) {
      absl::StrAppend(&out, "nrtprof_model_executions_total{pid=\"", std::get<0>(key),
                      "\",executable=\"", Label(std::get<1>(key)), "\",model=\"",
                      Label(std::get<2>(key)), "\"} ", n, "\n");
    }
    Header(&out, "nrtprof_model_device_seconds", "histogram",
           "device time of each execution (nc_exec_running), by process and model");
    for (const auto& [key, h] : device_) {
      const std::string labels =
          absl::StrCat("pid=\"", std::get<0>(key), "\",executable=\"", Label(std::get<1>(key)),
                       "\",model=\"", Label(std::get<2>(key)), "\"");
      uint64_t cumulative = 0;
      for (size_t i = 0; i < DeviceBuckets().size(); ++i) {
        cumulative += h.buckets[i];
        absl::StrAppend(&out, "nrtprof_model_device_seconds_bucket{", labels, ",le=\"",
                        absl::StrFormat("%g", DeviceBuckets()[i]), "\"} ", cumulative, "\n");
      }
      absl::StrAppend(&out, "nrtprof_model_device_seconds_bucket{", labels, ",le=\"+Inf\"} ",
                      h.count, "\n");
      absl::StrAppend(&out, "nrtprof_model_device_seconds_sum{", labels, "} ",
                      absl::StrFormat("%.9f", h.sum), "\n");
      absl::StrAppend(&out, "nrtprof_model_device_seconds_count{", labels, "} ", h.count, "\n");
    }
    Header(&out, "nrtprof_op_calls_total", "counter",
           "calls of each key_averages row: framework ops, and runtime calls outside any op");
    for (const auto& [name, op] : ops_) {
      absl::StrAppend(&out, "nrtprof_op_calls_total{op=\"", Label(name), "\"} ", op.calls, "\n");
    }
    Header(&out, "nrtprof_op_host_seconds_total", "counter", "self CPU time, by op");
    for (const auto& [name, op] : ops_) {
      absl::StrAppend(&out, "nrtprof_op_host_seconds_total{op=\"", Label(name), "\"} ",
                      Seconds(op.host_ns), "\n");
    }
    Header(&out, "nrtprof_op_device_seconds_total", "counter", "self NEURON (device) time, by op");
    for (const auto& [name, op] : ops_) {
      absl::StrAppend(&out, "nrtprof_op_device_seconds_total{op=\"", Label(name), "\"} ",
                      Seconds(op.device_ns), "\n");
    }
    Header(&out, "nrtprof_uncorrelated_device_seconds_total", "counter",
           "device time no runtime call could be matched to");
    absl::StrAppend(&out, "nrtprof_uncorrelated_device_seconds_total ",
                    Seconds(uncorrelated_device_ns_), "\n");
  }
  Header(&out, "nrtprof_events_received_total", "counter", "events the daemon received");
  absl::StrAppend(&out, "nrtprof_events_received_total ", status.events_received(), "\n");
  Header(&out, "nrtprof_events_dropped_total", "counter", "events lost, by reason");
  for (const nrtprof::DropReason& d : status.dropped()) {
    absl::StrAppend(&out, "nrtprof_events_dropped_total{reason=\"", Label(d.reason()), "\"} ",
                    d.events(), "\n");
  }
  Header(&out, "nrtprof_events_dropped_by_lane_total", "counter", "events lost, by lane");
  const nrtprof::EventsByLane& lanes = status.dropped_by_lane();
  absl::StrAppend(&out, "nrtprof_events_dropped_by_lane_total{lane=\"framework\"} ",
                  lanes.framework(), "\n", "nrtprof_events_dropped_by_lane_total{lane=\"runtime\"} ",
                  lanes.runtime(), "\n", "nrtprof_events_dropped_by_lane_total{lane=\"hardware\"} ",
                  lanes.hardware(), "\n");
  Header(&out, "nrtprof_connected_processes", "gauge", "processes streaming to the daemon");
  absl::StrAppend(&out, "nrtprof_connected_processes ", status.processes_size(), "\n");
  const nrtprof::FlightRecorderStatus& r = status.flight_recorder();
  Header(&out, "nrtprof_flight_recorder_bytes", "gauge", "bytes the flight recorder holds");
  absl::StrAppend(&out, "nrtprof_flight_recorder_bytes ", r.bytes(), "\n");
  Header(&out, "nrtprof_flight_recorder_batches", "gauge", "batches the flight recorder holds");
  absl::StrAppend(&out, "nrtprof_flight_recorder_batches ", r.batches(), "\n");
  Header(&out, "nrtprof_flight_recorder_events", "gauge", "events the flight recorder holds");
  absl::StrAppend(&out, "nrtprof_flight_recorder_events ", r.events(), "\n");
  Header(&out, "nrtprof_flight_recorder_oldest_age_seconds", "gauge",
         "how far back the flight recorder reaches");
  absl::StrAppend(&out, "nrtprof_flight_recorder_oldest_age_seconds ",
                  absl::StrFormat("%.3f", r.oldest_age_ms() / 1e3), "\n");
  Header(&out, "nrtprof_flight_recorder_evicted_events_total", "counter",
         "events the flight recorder let go over its bounds");
  absl::StrAppend(&out, "nrtprof_flight_recorder_evicted_events_total ", r.evicted_events(), "\n");
  return out;
}

}  // namespace nrtprof::daemon
