// A ClickHouse server over its HTTP interface (port 8123), with libcurl: what the daemon's
// fleet exporter (daemon/fleet_exporter.h) and `nrtprof fleet` send it. One request at a time
// per client; the query goes in the URL's `query` parameter, any data (an INSERT's rows) in
// the body, the database in `database`, a user and password as HTTP basic authentication.
//
// Thread-compatible: a client is used by one thread at a time; several clients may run at once
// (curl_global_init is done once, on first use, under a lock of its own).
#ifndef NRTPROF_COMMON_CLICKHOUSE_HTTP_H_
#define NRTPROF_COMMON_CLICKHOUSE_HTTP_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace nrtprof {

struct ClickHouseConfig {
  std::string url;       // http://HOST:8123 or https://...
  std::string database;  // empty: the server's default
  std::string user;      // empty: the server's default user, no password
  std::string password;
};

// InvalidArgument (one line naming `flag`) unless `url` is http:// or https:// with a host.
absl::Status CheckClickHouseUrl(absl::string_view url, absl::string_view flag);

// The password from --clickhouse_password_file: the file's one line, mode 0600 or stricter
// (as token files, common/credential_files.h).
absl::StatusOr<std::string> ReadClickHousePassword(const std::string& path);

// `value` as a ClickHouse string literal: '...' with quote and backslash escaped.
std::string ClickHouseQuote(absl::string_view value);

class ClickHouseClient {
 public:
  explicit ClickHouseClient(ClickHouseConfig config);
  ~ClickHouseClient();
  ClickHouseClient(const ClickHouseClient&) = delete;
  ClickHouseClient& operator=(const ClickHouseClient&) = delete;

  // Runs `query` with `body` as its data (an INSERT's rows; may be empty) and returns the
  // response body. Unavailable: no answer within timeout_ms (server away, refused, cut off);
  // an HTTP error status is FailedPrecondition with ClickHouse's own first line (a bad query,
  // a missing table, a wrong password).
  absl::StatusOr<std::string> Run(absl::string_view query, absl::string_view body = "",
                                  long timeout_ms = 10'000);

  const ClickHouseConfig& config() const { return config_; }

 private:
  ClickHouseConfig config_;
  void* curl_;  // CURL*
};

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_CLICKHOUSE_HTTP_H_
