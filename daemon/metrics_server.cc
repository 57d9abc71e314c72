#include "daemon/metrics_server.h"

#include <arpa/inet.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/trigger_captures.h"
#include "httplib.h"

namespace nrtprof::daemon {
namespace {

bool IsLoopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen,
                                                                    const std::string& cert_file,
                                                                    const std::string& key_file,
                                                                    CollectorCore* core,
                                                                    Metrics* metrics) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen '", listen, "' is not HOST:PORT (port 0: any free one)"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const bool tls = !cert_file.empty() && !key_file.empty();
  if (!tls && !IsLoopback(host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen ", listen,
                     " is not a loopback address: metrics leave the host only over TLS "
                     "(--tls_cert and --tls_key)"));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer(core, metrics));
  if (tls) {
    auto https = std::make_unique<httplib::SSLServer>(cert_file.c_str(), key_file.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--metrics_listen: cannot use the certificate ", cert_file, " and key ", key_file));
    }
    server->http_ = std::move(https);
  } else {
    server->http_ = std::make_unique<httplib::Server>();
  }
  MetricsServer* self = server.get();
  server->http_->Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    self->core_->FoldMetrics(self->metrics_);
    const nrtprof::StatusReply status = self->core_->Status();
    // The trigger rules' counts (trigger_captures.h), after the metrics' own.
    res.set_content(self->metrics_->Render(status) + RenderTriggerMetrics(status),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound = port == 0 ? server->http_->bind_to_any_port(host.c_str())
                              : (server->http_->bind_to_port(host.c_str(), port) ? port : -1);
  if (bound < 0) {
    return absl::UnavailableError(absl::StrCat("--metrics_listen: cannot listen on ", listen));
  }
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  server->url_ = absl::StrCat(tls ? "https://" : "http://", shown, ":", bound, "/metrics");
  server->serving_ = std::thread([self] { self->http_->listen_after_bind(); });
  server->folding_ = std::thread([self] {
    std::unique_lock<std::mutex> lock(self->mu_);
    while (!self->stop_cv_.wait_for(lock, kFoldPeriod, [self] { return self->stopped_; })) {
      lock.unlock();
      self->core_->FoldMetrics(self->metrics_);
      lock.lock();
    }
  });
  return server;
}

void MetricsServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop_cv_.notify_all();
  if (http_) http_->stop();
  if (serving_.joinable()) serving_.join();
  if (folding_.joinable()) folding_.join();
}

MetricsServer::MetricsServer(CollectorCore* core, Metrics* metrics)
    : core_(core), metrics_(metrics) {}

MetricsServer::~MetricsServer() { Stop(); }

}  // namespace nrtprof::daemon
