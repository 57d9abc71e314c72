// nrtprofd --clickhouse_url: the fleet store's exporter. Every period (10 s by default) it folds
// what the flight recorder received (CollectorCore::FoldMetrics, the metrics' own fold) and
// queues one batch of rows for ClickHouse's table fleet_ops, one row per (process, executable,
// model, op) with what happened in the period (Metrics::TakeFleetRows), and one batch for
// fleet_ranks, one row per process that waited in collectives (its rank, job, collectives and
// wait: Metrics::TakeFleetRankRows); each capture the daemon writes queues one row for
// fleet_captures, with the rule and reason of a trigger rule that took it. The schema is
// docs/fleet_schema.sql; its statements run at every (re)connection, and the columns a table
// made by an older daemon lacks are added to it (AddMissingColumns).
//
// A thread of its own sends the batches, in order, over HTTP (common/clickhouse_http.h), and
// retries one that fails with exponential backoff (250 ms doubling to 30 s); nothing else waits
// for it. While ClickHouse is away batches stay queued up to buffer_bytes; a batch that does
// not fit is dropped and its rows counted (Status: rows_dropped). Every row carries the
// daemon's instance id and its batch's number (daemon, seq): before retrying a batch the
// exporter asks ClickHouse whether that batch is already there (an insert whose answer was
// lost), so a retry never adds rows twice.
//
// Thread-safe: Start once, then CaptureWritten and FillStatus from any thread; Stop (or the
// destructor) once.
#ifndef NRTPROF_DAEMON_FLEET_EXPORTER_H_
#define NRTPROF_DAEMON_FLEET_EXPORTER_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/clickhouse_http.h"
#include "daemon/collector_core.h"
#include "daemon/metrics.h"
#include "trace/summary.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

struct FleetExporterOptions {
  ClickHouseConfig clickhouse;  // its database: made if missing
  std::string host;             // the rows' host column
  // This machine's name as its programs say it (their Hello.host, gethostname): a capture's
  // processes from this machine are listed under `host` in fleet_captures.hosts, as every other
  // row names it; a process streaming from another machine keeps its own.
  std::string machine;
  uint64_t buffer_bytes = 64ull << 20;
  std::chrono::milliseconds period{10'000};
  std::function<void(const std::string&)> log;  // one line each; null: nowhere
};

class FleetExporter {
 public:
  static constexpr std::chrono::milliseconds kFirstBackoff{250};
  static constexpr std::chrono::milliseconds kMaxBackoff{30'000};
  static constexpr size_t kTopOps = 10;

  // InvalidArgument (one line) for a database name other than letters, digits and '_'.
  static absl::Status CheckDatabaseName(const std::string& name);

  explicit FleetExporter(FleetExporterOptions options);
  ~FleetExporter();
  FleetExporter(const FleetExporter&) = delete;
  FleetExporter& operator=(const FleetExporter&) = delete;

  // Starts the export and the sending threads. `core` and `metrics` must outlive the exporter
  // (or its Stop); metrics keeps fleet rows from now on.
  void Start(CollectorCore* core, Metrics* metrics);
  // Queues the row of a capture just written. Never waits for ClickHouse.
  void CaptureWritten(const Trace& trace, const Summary& summary,
                      const nrtprof::CaptureFiles& files);
  void FillStatus(nrtprof::FleetExportStatus* out) const;
  // A last export, then up to kStopWait to send what is queued; what is left is said in one
  // line and counted as dropped. An insert under way is waited for (at most 10 s, its timeout).
  void Stop();
  static constexpr std::chrono::milliseconds kStopWait{2'000};

 private:
  struct Batch {
    std::string table;
    uint64_t seq = 0;
    int64_t time = 0;  // Unix seconds: the rows' time column
    uint64_t rows = 0;
    std::string body;  // JSONEachRow
    int attempts = 0;
  };

  void ExportLoop();
  void SendLoop();
  // A fold, then MakeRows; their CPU time counted.
  void ExportOnce();
  // The rows folded since the last export, queued as one batch.
  void MakeRows();
  // The rank rows folded since the last export, queued as one batch of fleet_ranks.
  void MakeRankRows(int64_t time);
  // Queues a batch of `rows` rows made by `make(seq)`, or drops and counts it if the buffer
  // has no room.
  void Enqueue(const std::string& table, int64_t time, uint64_t rows,
               const std::function<std::string(uint64_t seq)>& make);
  // Sends the oldest batch (checking first, on a retry, whether it is in already).
  absl::Status SendHead(ClickHouseClient* client, Batch* batch);
  absl::Status EnsureSchema(ClickHouseClient* client);
  // The columns the schema declares for `table` (name, declaration) that the table in the
  // store lacks, added (fleet_exporter.cc says when it refuses).
  absl::Status AddMissingColumns(
      ClickHouseClient* client, const std::string& table,
      const std::vector<std::pair<std::string, std::string>>& columns);
  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  const FleetExporterOptions options_;
  const std::string instance_;  // HOST-RANDOM: the daemon column
  CollectorCore* core_ = nullptr;
  Metrics* metrics_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t bytes_queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_exported_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool dropping_ ABSL_GUARDED_BY(mu_) = false;  // said once per spell of drops
  uint64_t captures_exported_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t retries_found_in_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t exports_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fold_cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t send_cpu_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  bool schema_ready_ = false;  // the sending thread's own

  std::thread exporting_;
  std::thread sending_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_FLEET_EXPORTER_H_
