#include "daemon/metrics.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/nrtprof.pb.h"
#include "trace/collectives.h"
#include "trace/summary.h"

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

// The histogram bucket of a device time: the first bound at or above it, or one past the last.
size_t BucketOf(uint64_t ns) {
  const std::vector<double>& bounds = Metrics::DeviceBuckets();
  return std::lower_bound(bounds.begin(), bounds.end(), ns / 1e9) - bounds.begin();
}

std::string Seconds(uint64_t ns) { return absl::StrFormat("%.9f", ns / 1e9); }

void Header(std::string* out, const char* name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

// The fleet store's exporter (nrtprofd --clickhouse_url).
void RenderFleetExport(const nrtprof::FleetExportStatus& f, std::string* out) {
  Header(out, "nrtprof_fleet_rows_exported_total", "counter",
         "rows of fleet_ops and fleet_ranks ClickHouse took");
  absl::StrAppend(out, "nrtprof_fleet_rows_exported_total ", f.rows_exported(), "\n");
  Header(out, "nrtprof_fleet_rows_dropped_total", "counter",
         "rows for ClickHouse dropped over --clickhouse_buffer_bytes (or unsent at exit)");
  absl::StrAppend(out, "nrtprof_fleet_rows_dropped_total ", f.rows_dropped(), "\n");
  Header(out, "nrtprof_fleet_rows_buffered", "gauge", "rows waiting for ClickHouse");
  absl::StrAppend(out, "nrtprof_fleet_rows_buffered ", f.rows_buffered(), "\n");
  Header(out, "nrtprof_fleet_bytes_buffered", "gauge", "bytes waiting for ClickHouse");
  absl::StrAppend(out, "nrtprof_fleet_bytes_buffered ", f.bytes_buffered(), "\n");
  Header(out, "nrtprof_fleet_retries_total", "counter", "inserts into ClickHouse tried again");
  absl::StrAppend(out, "nrtprof_fleet_retries_total ", f.retries(), "\n");
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
  std::lock_guard<std::mutex> lock(mu_);
  // The counters each name's events go to, found once per name and fold: keyed by the Name's
  // id (trace_name.h: one text, one id within the Trace's table), so that no event's text is
  // copied, hashed or compared. The maps' elements never move (std::map), and every event
  // still adds to its counter in the order it came, so the sums are the same to the bit.
  absl::flat_hash_map<std::pair<const void*, int32_t>, uint64_t*> calls_of;
  for (const ProcessTrace& p : trace.processes) {
    // The process's labels (and its place among the kMaxProcessSeries), the first time a
    // series of it is needed.
    std::optional<ModelKey> process;
    auto key_of = [&](const Name& model) {
      if (!process) process = KeyOf(p.pid, p.executable, "");
      return ModelKey(std::get<0>(*process), std::get<1>(*process),
                      model.empty() ? std::string("unknown") : model.str());
    };
    if (p.executions_held_by_program != 0) {
      if (!process) process = KeyOf(p.pid, p.executable, "");
      held_[*process] += p.executions_held_by_program;
    }
    absl::flat_hash_map<const void*, uint64_t*> executions_of;  // by model
    for (const ApiCall& call : p.calls) {
      uint64_t*& calls = calls_of[{call.name.id(), call.status}];
      if (calls == nullptr) calls = &calls_[{call.name.str(), call.status}];
      ++*calls;
      // A recorded completion poll stands for this thread's polls before it that saw nothing
      // new (and so returned NRT_SUCCESS).
      if (call.polls != 0) {
        uint64_t*& ok = calls_of[{call.name.id(), 0}];
        if (ok == nullptr) ok = &calls_[{call.name.str(), 0}];
        *ok += call.polls;
      }
      if (call.function == nrtprof::API_NRT_EXECUTE ||
          call.function == nrtprof::API_NRT_EXECUTE_REPEAT) {
        uint64_t*& executions = executions_of[call.model_name.id()];
        if (executions == nullptr) executions = &executions_[key_of(call.model_name)];
        *executions += std::max<uint32_t>(call.repeat, 1);
      }
    }
    // A thread's polls after its last recorded one, counted when it ended.
    for (const PollTally& t : p.poll_tallies) {
      uint64_t*& ok = calls_of[{t.name.id(), 0}];
      if (ok == nullptr) ok = &calls_[{t.name.str(), 0}];
      *ok += t.polls;
    }
    // A collective's wait for the other ranks: its barrier (as the summary's collective wait
    // rows count it). Only counted here; the rank is read once per process below.
    uint64_t collectives = 0, wait_ns = 0;
    absl::flat_hash_map<const void*, Histogram*> device_of;  // by model
    const std::vector<double>& bounds = DeviceBuckets();
    for (const DeviceEvent& e : p.device) {
      if (e.kind == DeviceEventKind::kCollective) {
        if (e.parent == 0 && e.name == kCcExecBarrier) {
          ++collectives;
          wait_ns += e.duration_ns;
        }
        continue;
      }
      if (e.name != "nc_exec_running") continue;
      Histogram*& histogram = device_of[e.model_name.id()];
      if (histogram == nullptr) {
        histogram = &device_[key_of(e.model_name)];
        if (histogram->buckets.empty()) histogram->buckets.assign(bounds.size(), 0);
      }
      Histogram& h = *histogram;
      const size_t b = BucketOf(e.duration_ns);
      if (b < bounds.size()) ++h.buckets[b];
      ++h.count;
      h.sum += e.duration_ns / 1e9;
    }
    if (collectives != 0) AddCollectiveWait(p, collectives, wait_ns);
    // The key_averages rows of this process, and for the fleet store where each device
    // event's time went, by (op, model): by the row's name as the summary holds it (one
    // string per row while it is computed) and the model's Name, then by their text.
    struct Part {
      std::string op;
      Name model;
      FleetRow row;
    };
    absl::flat_hash_map<std::pair<const void*, const void*>, Part> parts;
    const Summary summary = ComputeProcessSummary(
        p, [&](const DeviceEvent& d, const std::string& row) {
          if (!keep_fleet_rows_) return;
          auto [it, added] =
              parts.try_emplace({row.empty() ? nullptr : &row, d.model_name.id()});
          Part& part = it->second;
          if (added) {
            part.op = row.empty() ? kUncorrelatedOp : row;
            part.model = d.model_name;
          }
          FleetRow& r = part.row;
          r.device_ns += d.duration_ns;
          if (d.kind != DeviceEventKind::kExecution) return;
          ++r.executions;
          if (r.device_histogram.empty()) r.device_histogram.assign(DeviceBuckets().size() + 1, 0);
          ++r.device_histogram[BucketOf(d.duration_ns)];
        });
    for (const SummaryRow& row : summary.rows) {
      OpTimes& op = ops_[row.name];
      op.calls += row.calls;
      op.host_ns += row.self_cpu_ns;
      op.device_ns += row.self_device_ns;
    }
    uncorrelated_device_ns_ += summary.uncorrelated_device_ns;
    if (keep_fleet_rows_) {
      std::map<std::pair<std::string, std::string>, FleetRow> by_op_model;
      for (auto& [key, part] : parts) {
        FleetRow& r = by_op_model[{std::move(part.op), part.model.str()}];
        r.device_ns += part.row.device_ns;
        r.executions += part.row.executions;
        if (part.row.device_histogram.empty()) continue;
        if (r.device_histogram.empty()) r.device_histogram.assign(DeviceBuckets().size() + 1, 0);
        for (size_t i = 0; i < r.device_histogram.size(); ++i) {
          r.device_histogram[i] += part.row.device_histogram[i];
        }
      }
      AddFleetRows(p, summary, by_op_model);
    }
  }
}

void Metrics::AddCollectiveWait(const ProcessTrace& p, uint64_t collectives, uint64_t wait_ns) {
  const ModelKey process = KeyOf(p.pid, p.executable, "");
  const bool other = std::get<0>(process) == "other";
  const int rank = other ? -1 : RankOf(p);
  CollectiveWait& w = collectives_[process];
  if (w.rank.empty()) w.rank = other ? "other" : rank < 0 ? "unknown" : std::to_string(rank);
  w.collectives += collectives;
  w.wait_ns += wait_ns;
  if (!keep_fleet_rows_) return;
  FleetRankRow& r = fleet_ranks_[process];
  if (r.pid.empty()) {
    r.pid = std::get<0>(process);
    r.executable = std::get<1>(process);
    r.rank = rank;
    // The job it names (Hello.job), else its command line without the rank: the ranks of one
    // job compare with each other across hosts either way, but two runs of one command line
    // stay apart only by their job ids.
    r.job = other ? "other" : !p.job.empty() ? p.job : JobFromCommandLine(p.command_line);
  }
  r.collectives += collectives;
  r.wait_ns += wait_ns;
}

void Metrics::AddFleetRows(
    const ProcessTrace& p, const Summary& summary,
    const std::map<std::pair<std::string, std::string>, FleetRow>& by_op_model) {
  const ModelKey process = KeyOf(p.pid, p.executable, "");
  auto row_of = [&](const std::string& op, const std::string& model) -> FleetRow& {
    FleetRow& r = fleet_[FleetKey(std::get<0>(process), std::get<1>(process), model, op)];
    if (r.op.empty()) {
      r.pid = std::get<0>(process);
      r.executable = std::get<1>(process);
      r.model = model;
      r.op = op;
      r.device_histogram.assign(DeviceBuckets().size() + 1, 0);
    }
    return r;
  };
  // Each op's calls and host time go to the model it spent most device time in ("" if none).
  std::map<std::string, std::pair<uint64_t, std::string>> main_model;
  for (const auto& [key, part] : by_op_model) {
    FleetRow& r = row_of(key.first, key.second);
    r.device_ns += part.device_ns;
    r.executions += part.executions;
    for (size_t i = 0; i < part.device_histogram.size(); ++i) {
      r.device_histogram[i] += part.device_histogram[i];
    }
    auto [it, added] = main_model.try_emplace(key.first, part.device_ns, key.second);
    if (!added && part.device_ns > it->second.first) it->second = {part.device_ns, key.second};
  }
  for (const SummaryRow& row : summary.rows) {
    auto it = main_model.find(row.name);
    FleetRow& r = row_of(row.name, it == main_model.end() ? "" : it->second.second);
    r.calls += row.calls;
    r.host_ns += row.self_cpu_ns;
  }
}

void Metrics::KeepFleetRows(bool keep) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_fleet_rows_ = keep;
}

std::vector<Metrics::FleetRow> Metrics::TakeFleetRows() {
  std::map<FleetKey, FleetRow> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    taken.swap(fleet_);
  }
  std::vector<FleetRow> rows;
  rows.reserve(taken.size());
  for (auto& [key, row] : taken) rows.push_back(std::move(row));
  return rows;
}

std::vector<Metrics::FleetRankRow> Metrics::TakeFleetRankRows() {
  std::map<ModelKey, FleetRankRow> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    taken.swap(fleet_ranks_);
  }
  std::vector<FleetRankRow> rows;
  rows.reserve(taken.size());
  for (auto& [key, row] : taken) rows.push_back(std::move(row));
  return rows;
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
    Header(&out, "nrtprof_collective_wait_seconds_total", "counter",
           "time each rank waited in its collectives for the other ranks (cc_exec_barrier), by "
           "process and rank: the least in a job is its straggler's");
    for (const auto& [key, w] : collectives_) {
      absl::StrAppend(&out, "nrtprof_collective_wait_seconds_total{pid=\"", std::get<0>(key),
                      "\",executable=\"", Label(std::get<1>(key)), "\",rank=\"", w.rank, "\"} ",
                      Seconds(w.wait_ns), "\n");
    }
    Header(&out, "nrtprof_collectives_total", "counter",
           "collectives each rank waited in (their barriers), by process and rank");
    for (const auto& [key, w] : collectives_) {
      absl::StrAppend(&out, "nrtprof_collectives_total{pid=\"", std::get<0>(key),
                      "\",executable=\"", Label(std::get<1>(key)), "\",rank=\"", w.rank, "\"} ",
                      w.collectives, "\n");
    }
    Header(&out, "nrtprof_executions_held_by_program_total", "counter",
           "executions counted before their device events reached nrtprof: the program runs the "
           "runtime's system trace itself (nrt_sys_trace_start), and nrtprof receives them only "
           "as it fetches them. Their device time is counted when they come, as uncorrelated, "
           "and their model may be \"unknown\" in nrtprof_model_executions_total");
    for (const auto& [key, n] : held_) {
      absl::StrAppend(&out, "nrtprof_executions_held_by_program_total{pid=\"", std::get<0>(key),
                      "\",executable=\"", Label(std::get<1>(key)), "\"} ", n, "\n");
    }
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
  if (status.has_fleet_export()) RenderFleetExport(status.fleet_export(), &out);
  return out;
}

}  // namespace nrtprof::daemon
