// nrtprofd --metrics_listen HOST:PORT: serves /metrics (metrics.h) over HTTP for Prometheus to
// scrape, with cpp-httplib. Loopback only, unless the daemon's TLS certificate and key are given
// (--tls_cert, --tls_key): then HTTPS on any address. Each scrape first folds in what the
// flight recorder received since the last one (CollectorCore::FoldMetrics); a thread of its own
// also folds every kFoldPeriod, so that nothing ages out of the recorder between scrapes.
//
// Thread-safe: Start, then Stop (or destroy) from one thread; scrapes run on httplib's threads.
#ifndef NRTPROF_DAEMON_METRICS_SERVER_H_
#define NRTPROF_DAEMON_METRICS_SERVER_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/collector_core.h"
#include "daemon/metrics.h"

namespace httplib {
class Server;
}

namespace nrtprof::daemon {

class MetricsServer {
 public:
  static constexpr std::chrono::seconds kFoldPeriod{10};

  // InvalidArgument (one line) for an address that is not HOST:PORT, or not loopback without
  // TLS; Unavailable if it cannot be bound. `core` and `metrics` (the daemon's one set of
  // folded counters, which the fleet exporter may fold into too) must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                              const std::string& cert_file,
                                                              const std::string& key_file,
                                                              CollectorCore* core,
                                                              Metrics* metrics);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // "http://HOST:PORT/metrics" (https with TLS), the port bound.
  const std::string& url() const { return url_; }
  void Stop();

 private:
  MetricsServer(CollectorCore* core, Metrics* metrics);

  CollectorCore* const core_;
  Metrics* const metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::thread serving_;
  std::thread folding_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopped_ = false;
  std::string url_;
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_METRICS_SERVER_H_
