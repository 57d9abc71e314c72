#include "common/clickhouse_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "common/credential_files.h"

namespace nrtprof {
namespace {

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// ClickHouse's error: "Code: 60, e.displayText() = DB::Exception: Table x doesn't exist., ..."
// cut to its first line.
std::string FirstLine(const std::string& body) {
  std::string line = body.substr(0, body.find('\n'));
  absl::StripAsciiWhitespace(&line);
  return line.empty() ? "(no message)" : line;
}

}  // namespace

absl::Status CheckClickHouseUrl(absl::string_view url, absl::string_view flag) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://") && !absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " '", url, "' is not an http:// or https:// URL (e.g. http://127.0.0.1:8123)"));
  }
  if (rest.empty() || rest[0] == '/' || rest[0] == ':' ||
      rest.find_first_of("?# \t\n") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " '", url, "' names no server (http://HOST:PORT, without a query)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadClickHousePassword(const std::string& path) {
  return ReadPrivateLine(path, "--clickhouse_password_file");
}

std::string ClickHouseQuote(absl::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

ClickHouseClient::ClickHouseClient(ClickHouseConfig config) : config_(std::move(config)) {
  GlobalInit();
  curl_ = curl_easy_init();
}

ClickHouseClient::~ClickHouseClient() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

absl::StatusOr<std::string> ClickHouseClient::Run(absl::string_view query, absl::string_view body,
                                                   long timeout_ms) {
  CURL* curl = static_cast<CURL*>(curl_);
  if (curl == nullptr) return absl::InternalError("libcurl could not start a session");
  char* escaped = curl_easy_escape(curl, query.data(), static_cast<int>(query.size()));
  std::string url = absl::StrCat(config_.url, absl::EndsWith(config_.url, "/") ? "" : "/",
                                 "?query=", escaped == nullptr ? "" : escaped);
  curl_free(escaped);
  if (!config_.database.empty()) {
    char* db = curl_easy_escape(curl, config_.database.data(),
                                static_cast<int>(config_.database.size()));
    absl::StrAppend(&url, "&database=", db == nullptr ? "" : db);
    curl_free(db);
  }
  curl_easy_reset(curl);
  std::string response;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, std::min(timeout_ms, 3000L));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  // A connection of its own for every request: libcurl sends a request again by itself when a
  // reused connection closes before any answer, and an INSERT ClickHouse ran then goes in twice.
  curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
  curl_easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
  if (!config_.user.empty()) {
    curl_easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(curl, CURLOPT_USERNAME, config_.user.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, config_.password.c_str());
  }
  const CURLcode code = curl_easy_perform(curl);
  if (code != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat("ClickHouse at ", config_.url, ": ", curl_easy_strerror(code)));
  }
  long http = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http);
  if (http != 200) {
    return absl::FailedPreconditionError(
        absl::StrCat("ClickHouse at ", config_.url, " answered ", http, ": ", FirstLine(response)));
  }
  return response;
}

}  // namespace nrtprof
