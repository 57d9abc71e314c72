#include "daemon/fleet_exporter.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/json_text.h"
#include "daemon/fleet_schema_sql.h"

namespace nrtprof::daemon {
namespace {

constexpr char kOpsTable[] = "fleet_ops";
constexpr char kCapturesTable[] = "fleet_captures";
constexpr char kRanksTable[] = "fleet_ranks";

std::string RandomHex() {
  uint64_t value = 0;
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, &value, sizeof(value)) != static_cast<ssize_t>(sizeof(value))) {
    value = static_cast<uint64_t>(RealtimeNs()) ^ (static_cast<uint64_t>(getpid()) << 40);
  }
  if (fd >= 0) close(fd);
  char hex[17];
  snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(value));
  return hex;
}

int64_t NowSeconds() { return RealtimeNs() / 1'000'000'000; }

uint64_t ThreadCpuNs() { return ClockNs(CLOCK_THREAD_CPUTIME_ID); }

template <typename T>
std::string JsonArray(const std::vector<T>& items) {
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

std::string JsonStrings(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(JsonString(s));
  return JsonArray(quoted);
}

// docs/fleet_schema.sql as single statements, comments and blank lines left out.
std::vector<std::string> SchemaStatements() {
  std::vector<std::string> statements;
  std::string current;
  for (absl::string_view line : absl::StrSplit(kFleetSchemaSql, '\n')) {
    line = line.substr(0, line.find("--"));
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StrAppend(&current, line, "\n");
    if (absl::EndsWith(absl::StripTrailingAsciiWhitespace(line), ";")) {
      current.erase(current.rfind(';'));
      statements.push_back(std::move(current));
      current.clear();
    }
  }
  return statements;
}

// A CREATE TABLE statement's table and its columns as declared ("trigger_rule String"), in
// order; no table for the schema's other statements (the view).
struct DeclaredTable {
  std::string name;
  std::vector<std::pair<std::string, std::string>> columns;  // (name, declaration)
};
DeclaredTable Declared(absl::string_view statement) {
  DeclaredTable t;
  statement = absl::StripLeadingAsciiWhitespace(statement);
  if (!absl::ConsumePrefix(&statement, "CREATE TABLE IF NOT EXISTS ")) return t;
  const size_t open = statement.find('(');
  if (open == absl::string_view::npos) return t;
  t.name = std::string(absl::StripAsciiWhitespace(statement.substr(0, open)));
  // The columns: split at the commas outside parentheses (Array(String)), up to the ')' that
  // closes the list.
  int depth = 0;
  size_t start = open + 1;
  for (size_t i = open + 1; i < statement.size() && depth >= 0; ++i) {
    const char c = statement[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' && depth == 0) || depth < 0) {
      const absl::string_view column = absl::StripAsciiWhitespace(statement.substr(start, i - start));
      const size_t space = column.find_first_of(" \t\n");
      if (space != absl::string_view::npos) {
        t.columns.emplace_back(std::string(column.substr(0, space)), std::string(column));
      }
      start = i + 1;
    }
  }
  return t;
}

}  // namespace

absl::Status FleetExporter::CheckDatabaseName(const std::string& name) {
  if (name.empty() || name.size() > 64 ||
      !std::all_of(name.begin(), name.end(),
                   [](char c) { return absl::ascii_isalnum(c) || c == '_'; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--clickhouse_database '", name, "' must be 1 to 64 letters, digits or '_'"));
  }
  return absl::OkStatus();
}

FleetExporter::FleetExporter(FleetExporterOptions options)
    : options_(std::move(options)), instance_(absl::StrCat(options_.host, "-", RandomHex())) {}

FleetExporter::~FleetExporter() { Stop(); }

void FleetExporter::Start(CollectorCore* core, Metrics* metrics) {
  core_ = core;
  metrics_ = metrics;
  metrics_->KeepFleetRows(true);
  // Named, so that their CPU time can be read apart (bench/fleet/run_fleet.sh).
  exporting_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "fleet-export");
    ExportLoop();
  });
  sending_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "fleet-send");
    SendLoop();
  });
}

void FleetExporter::Enqueue(const std::string& table, int64_t time, uint64_t rows,
                            const std::function<std::string(uint64_t seq)>& make) {
  std::lock_guard<std::mutex> lock(mu_);
  Batch batch{table, next_seq_++, time, rows, "", 0};
  batch.body = make(batch.seq);
  if (bytes_queued_ + batch.body.size() > options_.buffer_bytes) {
    if (!dropping_) {
      Log(absl::StrCat("fleet store: the buffer is full (", bytes_queued_, " of ",
                       options_.buffer_bytes, " bytes; ", last_error_,
                       "): dropping rows, counted in nrtprof status"));
    }
    dropping_ = true;
    rows_dropped_ += rows;
    return;
  }
  dropping_ = false;
  bytes_queued_ += batch.body.size();
  rows_queued_ += rows;
  queue_.push_back(std::move(batch));
  wake_.notify_all();
}

void FleetExporter::ExportOnce() {
  const uint64_t start_ns = ThreadCpuNs();
  core_->FoldMetrics(metrics_);
  const uint64_t folded_ns = ThreadCpuNs();
  MakeRows();
  std::lock_guard<std::mutex> lock(mu_);
  ++exports_;
  fold_cpu_ns_ += folded_ns - start_ns;
  rows_cpu_ns_ += ThreadCpuNs() - folded_ns;
}

void FleetExporter::MakeRows() {
  const int64_t time = NowSeconds();
  MakeRankRows(time);
  const std::vector<Metrics::FleetRow> rows = metrics_->TakeFleetRows();
  if (rows.empty()) return;
  Enqueue(kOpsTable, time, rows.size(), [&](uint64_t seq) {
    std::string body;
    const std::string tail = absl::StrCat(",\"daemon\":", JsonString(instance_), ",\"seq\":", seq,
                                          ",\"time\":", time, ",\"host\":",
                                          JsonString(options_.host), "}\n");
    for (const Metrics::FleetRow& r : rows) {
      uint32_t pid = 0;
      if (!absl::SimpleAtoi(r.pid, &pid)) pid = 0;  // "other"
      absl::StrAppend(&body, "{\"pid\":", pid, ",\"executable\":", JsonString(r.executable),
                      ",\"model\":", JsonString(r.model), ",\"op\":", JsonString(r.op),
                      ",\"calls\":", r.calls, ",\"host_ns\":", r.host_ns,
                      ",\"device_ns\":", r.device_ns, ",\"executions\":", r.executions,
                      ",\"device_hist\":", JsonArray(r.device_histogram), tail);
    }
    return body;
  });
}

void FleetExporter::MakeRankRows(int64_t time) {
  const std::vector<Metrics::FleetRankRow> rows = metrics_->TakeFleetRankRows();
  if (rows.empty()) return;
  Enqueue(kRanksTable, time, rows.size(), [&](uint64_t seq) {
    std::string body;
    const std::string tail =
        absl::StrCat(",\"daemon\":", JsonString(instance_), ",\"seq\":", seq, ",\"time\":", time,
                     ",\"host\":", JsonString(options_.host), "}\n");
    for (const Metrics::FleetRankRow& r : rows) {
      uint32_t pid = 0;
      if (!absl::SimpleAtoi(r.pid, &pid)) pid = 0;  // "other"
      absl::StrAppend(&body, "{\"pid\":", pid, ",\"executable\":", JsonString(r.executable),
                      ",\"rank\":", r.rank, ",\"job\":", JsonString(r.job),
                      ",\"collectives\":", r.collectives, ",\"wait_ns\":", r.wait_ns, tail);
    }
    return body;
  });
}

void FleetExporter::CaptureWritten(const Trace& trace, const Summary& summary,
                                   const nrtprof::CaptureFiles& files) {
  std::vector<std::string> hosts;
  for (const ProcessTrace& p : trace.processes) {
    const std::string& host =
        !options_.machine.empty() && p.host == options_.machine ? options_.host : p.host;
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  std::vector<SummaryRow> top = summary.rows;
  std::sort(top.begin(), top.end(), [](const SummaryRow& a, const SummaryRow& b) {
    return a.self_device_ns != b.self_device_ns ? a.self_device_ns > b.self_device_ns
                                                : a.name < b.name;
  });
  if (top.size() > kTopOps) top.resize(kTopOps);
  std::vector<std::string> top_names;
  std::vector<uint64_t> top_ns;
  for (const SummaryRow& r : top) {
    top_names.push_back(r.name);
    top_ns.push_back(r.self_device_ns);
  }
  auto unix_ms = [&](uint64_t monotonic_ns) {
    return static_cast<int64_t>(monotonic_ns) / 1'000'000 + trace.realtime_offset_ns / 1'000'000;
  };
  const std::vector<std::string> names(files.files().begin(), files.files().end());
  const int64_t time = NowSeconds();
  Enqueue(kCapturesTable, time, 1, [&](uint64_t seq) {
    return absl::StrCat(
        "{\"time\":", time, ",\"host\":", JsonString(options_.host),
        ",\"capture_id\":", JsonString(trace.capture_id), ",\"hosts\":", JsonStrings(hosts),
        ",\"start_ms\":", trace.processes.empty() ? 0 : unix_ms(trace.start_ns),
        ",\"end_ms\":", trace.processes.empty() ? 0 : unix_ms(trace.end_ns),
        ",\"output_dir\":", JsonString(files.output_dir()), ",\"files\":", JsonStrings(names),
        ",\"processes\":", files.processes(), ",\"events\":", files.events(),
        ",\"events_dropped\":", files.events_dropped(), ",\"top_ops\":", JsonStrings(top_names),
        ",\"top_ops_device_ns\":", JsonArray(top_ns), ",\"daemon\":", JsonString(instance_),
        ",\"seq\":", seq,
        // Why a trigger rule took it (daemon/trigger_captures.h); empty for a capture someone
        // asked for.
        ",\"trigger_rule\":", JsonString(trace.trigger.rule),
        ",\"trigger_condition\":", JsonString(trace.trigger.condition),
        ",\"trigger_reason\":", JsonString(trace.trigger.reason),
        ",\"trigger_value_ns\":", trace.trigger.value_ns,
        ",\"trigger_threshold_ns\":", trace.trigger.threshold_ns, "}\n");
  });
}

void FleetExporter::ExportLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, options_.period, [this] { return stopping_; })) {
    lock.unlock();
    ExportOnce();
    lock.lock();
  }
}

absl::Status FleetExporter::EnsureSchema(ClickHouseClient* client) {
  if (schema_ready_) return absl::OkStatus();
  ClickHouseConfig server = client->config();
  server.database.clear();
  ClickHouseClient plain(server);
  absl::StatusOr<std::string> made =
      plain.Run(absl::StrCat("CREATE DATABASE IF NOT EXISTS ", client->config().database));
  if (!made.ok()) return made.status();
  for (const std::string& statement : SchemaStatements()) {
    if (absl::StatusOr<std::string> r = client->Run(statement); !r.ok()) return r.status();
    const DeclaredTable table = Declared(statement);
    if (table.name.empty()) continue;
    if (absl::Status s = AddMissingColumns(client, table.name, table.columns); !s.ok()) return s;
  }
  schema_ready_ = true;
  return absl::OkStatus();
}

// CREATE TABLE IF NOT EXISTS leaves a table an older daemon made as it was: the columns the
// schema has since gained (fleet_captures' trigger_ columns) are added here, at its end as in
// the schema; its rows read them as their default ('', 0), and nothing on disk is rewritten.
// ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, so the table's columns are asked first. A
// table that is not a MergeTree is one made by hand (a Distributed table over a cluster's
// local tables, docs/fleet.md): altering it alone would leave the shards without the columns,
// so the daemon asks the operator to, and sends nothing until it is done.
absl::Status FleetExporter::AddMissingColumns(
    ClickHouseClient* client, const std::string& table,
    const std::vector<std::pair<std::string, std::string>>& columns) {
  absl::StatusOr<std::string> have = client->Run(absl::StrCat(
      "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = ",
      ClickHouseQuote(table), " FORMAT TSV"));
  if (!have.ok()) return have.status();
  const std::vector<absl::string_view> names = absl::StrSplit(*have, '\n', absl::SkipEmpty());
  std::vector<const std::pair<std::string, std::string>*> missing;
  for (const auto& column : columns) {
    if (std::find(names.begin(), names.end(), column.first) == names.end()) {
      missing.push_back(&column);
    }
  }
  if (missing.empty()) return absl::OkStatus();
  std::vector<std::string> missing_names;
  for (const auto* column : missing) missing_names.push_back(column->first);
  absl::StatusOr<std::string> engine = client->Run(absl::StrCat(
      "SELECT engine FROM system.tables WHERE database = currentDatabase() AND name = ",
      ClickHouseQuote(table), " FORMAT TSV"));
  if (!engine.ok()) return engine.status();
  const absl::string_view kind = absl::StripAsciiWhitespace(*engine);
  if (!absl::EndsWith(kind, "MergeTree")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", table, " (", kind, ", made by hand) lacks the column(s) ",
        absl::StrJoin(missing_names, ", "),
        ": add them to it and to the tables under it (docs/fleet.md, \"On a ClickHouse "
        "cluster\")"));
  }
  for (const auto* column : missing) {
    absl::StatusOr<std::string> added =
        client->Run(absl::StrCat("ALTER TABLE ", table, " ADD COLUMN ", column->second));
    if (!added.ok()) return added.status();
  }
  Log(absl::StrCat("fleet store: added the column(s) ", absl::StrJoin(missing_names, ", "),
                   " to ", table, " (made by an older nrtprofd)"));
  return absl::OkStatus();
}

absl::Status FleetExporter::SendHead(ClickHouseClient* client, Batch* batch) {
  if (absl::Status s = EnsureSchema(client); !s.ok()) return s;
  if (batch->attempts > 0) {
    // The last try may have gone in with its answer lost: then it is in, whole (one insert of
    // fewer rows than max_insert_block_size is one part, all or nothing).
    absl::StatusOr<std::string> count = client->Run(absl::StrCat(
        "SELECT count() FROM ", batch->table, " WHERE time = toDateTime(", batch->time,
        ") AND daemon = ", ClickHouseQuote(instance_), " AND seq = ", batch->seq));
    if (!count.ok()) return count.status();
    uint64_t n = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*count), &n) && n > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      ++retries_found_in_;
      return absl::OkStatus();
    }
  }
  absl::StatusOr<std::string> inserted =
      client->Run(absl::StrCat("INSERT INTO ", batch->table, " FORMAT JSONEachRow"), batch->body,
                  10'000);
  return inserted.status();
}

void FleetExporter::SendLoop() {
  ClickHouseClient client(options_.clickhouse);
  std::chrono::milliseconds backoff{0};
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (backoff.count() > 0) {
      wake_.wait_for(lock, stopping_ ? std::min(backoff, kFirstBackoff) : backoff,
                     [this] { return stopped_; });
    } else {
      wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
    }
    if (stopped_) break;
    // Only this thread pops, and a deque's push_back leaves its elements where they are.
    Batch* batch = &queue_.front();
    lock.unlock();
    const uint64_t start_ns = ThreadCpuNs();
    const absl::Status sent = SendHead(&client, batch);
    const uint64_t end_ns = ThreadCpuNs();
    lock.lock();
    send_cpu_ns_ += end_ns - start_ns;
    if (sent.ok()) {
      if (!last_error_.empty()) {
        Log(absl::StrCat("fleet store: ClickHouse at ", options_.clickhouse.url,
                         " takes rows again"));
      }
      last_error_.clear();
      bytes_queued_ -= batch->body.size();
      rows_queued_ -= batch->rows;
      (batch->table == kCapturesTable ? captures_exported_ : rows_exported_) += batch->rows;
      queue_.pop_front();
      backoff = std::chrono::milliseconds{0};
      continue;
    }
    if (last_error_.empty()) {
      Log(absl::StrCat("fleet store: ", sent.message(), "; keeping rows (up to ",
                       options_.buffer_bytes, " bytes) and retrying"));
    }
    last_error_ = std::string(sent.message());
    schema_ready_ = false;  // a server that was away may come back empty
    ++batch->attempts;
    ++retries_;
    backoff = backoff.count() == 0 ? kFirstBackoff : std::min(backoff * 2, kMaxBackoff);
  }
}

void FleetExporter::FillStatus(nrtprof::FleetExportStatus* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out->set_clickhouse_url(options_.clickhouse.url);
  out->set_rows_exported(rows_exported_);
  out->set_rows_buffered(rows_queued_);
  out->set_bytes_buffered(bytes_queued_);
  out->set_bytes_limit(options_.buffer_bytes);
  out->set_rows_dropped(rows_dropped_);
  out->set_retries(retries_);
  out->set_retries_found_in(retries_found_in_);
  out->set_last_error(last_error_);
  out->set_captures_exported(captures_exported_);
  out->set_period_ms(options_.period.count());
  out->set_exports(exports_);
  out->set_fold_cpu_ns(fold_cpu_ns_);
  out->set_rows_cpu_ns(rows_cpu_ns_);
  out->set_send_cpu_ns(send_cpu_ns_);
}

void FleetExporter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || core_ == nullptr) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (exporting_.joinable()) exporting_.join();
  ExportOnce();
  {
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, kStopWait, [this] { return queue_.empty(); });
    stopped_ = true;
  }
  wake_.notify_all();
  if (sending_.joinable()) sending_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty()) {
    Log(absl::StrCat("fleet store: ", rows_queued_, " rows not sent at exit (", last_error_, ")"));
    rows_dropped_ += rows_queued_;
  }
}

}  // namespace nrtprof::daemon
