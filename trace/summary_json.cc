// summary.json: the summary as proto/summary_file.proto defines it, written (FormatJson) and read
// back (ParseSummaryJson, for `nrtprof summary`). Split from summary.cc, which computes the
// summary and writes its text and CSV tables.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/json_text.h"
#include "google/protobuf/util/json_util.h"
#include "proto/summary_file.pb.h"
#include "trace/summary.h"
#include "trace/summary_json.h"

namespace nrtprof::daemon {
namespace {

// summary.json has one definition, proto/summary_file.proto, which both the reader and this
// writer follow: the file is a SummaryFile filled in, then printed field by field as the
// descriptor lists them. Printed here rather than by protobuf's JSON printer, which quotes 64-bit
// integers as strings ("calls": "33") and would change the published file; the layout is the
// file's (the top level a key a line, each process and row a line).
summary_json::SummaryFile ToSummaryFile(const Summary& s, const std::vector<SummaryRow>& rows) {
  summary_json::SummaryFile f;
  f.set_capture_id(s.capture_id);
  for (const SummaryProcess& p : s.processes) {
    summary_json::Process* out = f.add_processes();
    out->set_pid(p.pid);
    out->set_host(p.host);
    out->set_command(p.command);
    out->set_job(p.job);
  }
  f.set_events(s.events);
  f.set_window_start_unix_ns(s.window_start_unix_ns);
  f.set_window_ns(s.window_ns);
  for (const SummaryRow& r : rows) {
    summary_json::Row* out = f.add_rows();
    out->set_name(r.name);
    out->set_self_cpu_ns(r.self_cpu_ns);
    out->set_cpu_total_ns(r.cpu_total_ns);
    out->set_self_device_ns(r.self_device_ns);
    out->set_device_total_ns(r.device_total_ns);
    out->set_calls(r.calls);
    out->set_queue_wait_ns(r.queue_wait_ns);
    out->set_queue_waits(r.queue_waits);
  }
  f.set_self_cpu_total_ns(s.self_cpu_total_ns);
  f.set_self_device_total_ns(s.self_device_total_ns);
  f.set_uncorrelated_device_events(s.uncorrelated_device_events);
  f.set_uncorrelated_device_ns(s.uncorrelated_device_ns);
  f.set_cut_off_processes(s.cut_off_processes);
  const DropCounts& d = s.drops;
  summary_json::EventsDropped* e = f.mutable_events_dropped();
  e->set_total(d.total());
  e->set_ring_full(d.ring_full);
  e->set_daemon_away(d.daemon_away);
  e->set_spool_full(d.spool_full);
  e->set_device_overwritten(d.device_overwritten);
  e->set_oversized(d.oversized);
  e->set_no_memory(d.no_memory);
  e->set_device_malformed(d.device_malformed);
  e->set_daemon_overflow(d.daemon_overflow);
  e->set_no_clock_sync(d.no_clock_sync);
  e->set_process_died(d.process_died);
  summary_json::EventsDroppedByLane* lane = f.mutable_events_dropped_by_lane();
  lane->set_framework(d.by_lane.framework);
  lane->set_runtime(d.by_lane.runtime);
  lane->set_hardware(d.by_lane.hardware);
  for (const std::string& n : s.notices) f.add_notices(n);
  f.set_async_device_events(s.async_device_events);
  f.set_async_executions(s.async_executions);
  f.set_async_executions_queue_empty(s.async_executions_queue_empty);
  f.set_completion_polls(s.completion_polls);
  f.set_completion_polls_recorded(s.completion_polls_recorded);
  for (const auto& [nc, busy] : s.device_busy_ns) {
    summary_json::CoreBusy* core = f.add_device_busy();
    core->set_nc(static_cast<uint32_t>(nc));
    core->set_busy_ns(busy);
  }
  summary_json::Trigger* trigger = f.mutable_trigger();
  trigger->set_rule(s.trigger.rule);
  trigger->set_condition(s.trigger.condition);
  trigger->set_reason(s.trigger.reason);
  trigger->set_value_ns(s.trigger.value_ns);
  trigger->set_threshold_ns(s.trigger.threshold_ns);
  return f;
}

void AppendJsonMessage(const google::protobuf::Message& m, bool top, std::string* out);

// One value of field `f` (the `index`-th, if repeated). Every field of the file's messages is
// an unsigned integer, a string or a message.
void AppendJsonValue(const google::protobuf::Message& m, const google::protobuf::FieldDescriptor* f,
                     int index, std::string* out) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool repeated = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT64:
      absl::StrAppend(out, repeated ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      absl::StrAppend(out, repeated ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      AppendJsonString(repeated ? r->GetRepeatedString(m, f, index) : r->GetString(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      AppendJsonMessage(repeated ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f),
                        /*top=*/false, out);
      break;
    default:
      // Not in the file's definition; a field of another type added to it is refused by
      // summary_test (SummaryJsonIsItsProtoDefinition) before it could reach here.
      out->append("null");
      break;
  }
}

// Every field of `m` in the definition's order. The file's top level has a key a line, and each
// process and row on a line of its own; anything inside is on one line.
void AppendJsonMessage(const google::protobuf::Message& m, bool top, std::string* out) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  out->append(top ? "{\n  " : "{");
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    absl::StrAppend(out, i == 0 ? "" : top ? ",\n  " : ", ", JsonString(f->name()), ": ");
    if (!f->is_repeated()) {
      AppendJsonValue(m, f, 0, out);
      continue;
    }
    const bool by_line =
        top && f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE;
    const int n = m.GetReflection()->FieldSize(m, f);
    out->push_back('[');
    for (int k = 0; k < n; ++k) {
      out->append(by_line ? (k == 0 ? "\n    " : ",\n    ") : (k == 0 ? "" : ", "));
      AppendJsonValue(m, f, k, out);
    }
    out->append(by_line && n > 0 ? "\n  ]" : "]");
  }
  out->append(top ? "\n}\n" : "}");
}

}  // namespace

std::string FormatJson(const Summary& s, const std::vector<SummaryRow>& rows) {
  std::string out;
  AppendJsonMessage(ToSummaryFile(s, rows), /*top=*/true, &out);
  return out;
}


namespace {

// ---- Reading summary.json ----------------------------------------------------------------

absl::Status FileError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("summary.json: ", what));
}

absl::Status ReadRow(const summary_json::Row& r, SummaryRow* row) {
  if (!r.has_name()) return FileError("a row without a \"name\" string");
  row->name = r.name();
  for (auto [key, present, value, field] :
       std::initializer_list<std::tuple<const char*, bool, uint64_t, uint64_t*>>{
           {"self_cpu_ns", r.has_self_cpu_ns(), r.self_cpu_ns(), &row->self_cpu_ns},
           {"cpu_total_ns", r.has_cpu_total_ns(), r.cpu_total_ns(), &row->cpu_total_ns},
           {"self_device_ns", r.has_self_device_ns(), r.self_device_ns(), &row->self_device_ns},
           {"device_total_ns", r.has_device_total_ns(), r.device_total_ns(), &row->device_total_ns},
           {"calls", r.has_calls(), r.calls(), &row->calls}}) {
    // The name as JSON writes it: whatever it holds, the error stays on one line.
    if (!present) {
      return FileError(absl::StrCat("row ", JsonString(r.name()), " has no \"", key, "\""));
    }
    *field = value;
  }
  row->queue_wait_ns = r.queue_wait_ns();
  row->queue_waits = r.queue_waits();
  return absl::OkStatus();
}

absl::Status ReadProcesses(const summary_json::SummaryFile& file, Summary* s) {
  for (const summary_json::Process& p : file.processes()) {
    if (!p.has_pid() || !p.has_host() || !p.has_command()) {
      return FileError("a process is not {\"pid\": N, \"host\": \"...\", \"command\": \"...\"}");
    }
    s->processes.push_back({p.pid(), p.host(), p.command(), p.job()});  // job: "" if older
  }
  return absl::OkStatus();
}

void ReadDrops(const summary_json::SummaryFile& file, DropCounts* d) {
  const summary_json::EventsDropped& e = file.events_dropped();
  d->ring_full = e.ring_full();
  d->daemon_away = e.daemon_away();
  d->spool_full = e.spool_full();
  d->device_overwritten = e.device_overwritten();
  d->oversized = e.oversized();
  d->no_memory = e.no_memory();
  d->device_malformed = e.device_malformed();
  d->daemon_overflow = e.daemon_overflow();
  d->no_clock_sync = e.no_clock_sync();
  d->process_died = e.process_died();
  const summary_json::EventsDroppedByLane& lane = file.events_dropped_by_lane();
  d->by_lane = {lane.framework(), lane.runtime(), lane.hardware()};
}

// Protobuf's parser, unknown keys ignored: a newer daemon's file still reads.
absl::Status ParseJson(absl::string_view json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message, options);
  if (status.ok()) return absl::OkStatus();
  // Its first line says what is wrong; the next two quote the text with a caret under it.
  absl::string_view what(status.message().data(), status.message().size());
  what = absl::StripPrefix(what.substr(0, what.find('\n')), ": ");
  return FileError(what);
}

// Whether `json` nests arrays and objects deeper than `limit`. Protobuf 3.21's JSON parser
// takes time that grows faster than the square of the depth for a google.protobuf.ListValue
// (SummaryFileRows): a file of nested brackets would hang the CLI. summary.json nests 3 deep.
bool NestedDeeperThan(absl::string_view json, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// Whether the file has "rows", asked only when it has no row: proto3 keeps no presence for a
// repeated field, and a file without its table is not an empty table.
absl::Status CheckRowsPresent(absl::string_view json) {
  constexpr int kMaxDepth = 64;
  if (NestedDeeperThan(json, kMaxDepth)) {
    return FileError(absl::StrCat("nested deeper than ", kMaxDepth, " levels"));
  }
  summary_json::SummaryFileRows rows;
  if (absl::Status st = ParseJson(json, &rows); !st.ok()) return st;
  if (!rows.has_rows()) return FileError("no \"rows\" array");
  if (rows.rows().values_size() != 0) return FileError("a row is not an object");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Summary> ParseSummaryJson(absl::string_view json) {
  summary_json::SummaryFile file;
  if (absl::Status st = ParseJson(json, &file); !st.ok()) return st;
  if (file.rows().empty()) {
    if (absl::Status st = CheckRowsPresent(json); !st.ok()) return st;
  }
  Summary s;
  for (const summary_json::Row& r : file.rows()) {
    if (absl::Status st = ReadRow(r, &s.rows.emplace_back()); !st.ok()) return st;
  }
  if (!file.has_self_cpu_total_ns()) return FileError("no \"self_cpu_total_ns\"");
  if (!file.has_self_device_total_ns()) return FileError("no \"self_device_total_ns\"");
  s.capture_id = file.capture_id();
  s.trigger.rule = file.trigger().rule();
  s.trigger.condition = file.trigger().condition();
  s.trigger.reason = file.trigger().reason();
  s.trigger.value_ns = file.trigger().value_ns();
  s.trigger.threshold_ns = file.trigger().threshold_ns();
  if (absl::Status st = ReadProcesses(file, &s); !st.ok()) return st;
  s.events = file.events();
  s.window_start_unix_ns = file.window_start_unix_ns();
  s.window_ns = file.window_ns();
  s.self_cpu_total_ns = file.self_cpu_total_ns();
  s.self_device_total_ns = file.self_device_total_ns();
  s.uncorrelated_device_events = file.uncorrelated_device_events();
  s.uncorrelated_device_ns = file.uncorrelated_device_ns();
  s.cut_off_processes = file.cut_off_processes();
  ReadDrops(file, &s.drops);
  s.notices.assign(file.notices().begin(), file.notices().end());
  s.async_device_events = file.async_device_events();
  s.async_executions = file.async_executions();
  s.async_executions_queue_empty = file.async_executions_queue_empty();
  s.completion_polls = file.completion_polls();
  s.completion_polls_recorded = file.completion_polls_recorded();
  for (const summary_json::CoreBusy& core : file.device_busy()) {
    s.device_busy_ns[static_cast<int32_t>(core.nc())] += core.busy_ns();
  }
  return s;
}

}  // namespace nrtprof::daemon
