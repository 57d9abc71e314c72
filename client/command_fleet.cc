// `nrtprof fleet top|query`: reads the fleet store, the ClickHouse tables nrtprofd
// --clickhouse_url fills (docs/fleet.md, docs/fleet_schema.sql).
//
//   nrtprof fleet top [--since 1h] [--by op|model|host|process] [--where KEY=VALUE]...
//                     [--limit N] [--format text|csv|json]
//       the device time, calls and host time of the fleet's ops (models, hosts, processes) in
//       the last --since, most device time first;
//   nrtprof fleet export [--since 1h] [--where KEY=VALUE]... [--format pprof|collapsed] [-o FILE]
//       the same sums as a pprof profile (or folded stacks) of model > op stacks, with the host
//       and pid as labels: trace/pprof_export.h, gzipped for FILE.gz (issue 42);
//   nrtprof fleet query "SQL"
//       any query, its answer as ClickHouse writes it (TabSeparated unless it says FORMAT).
//
// The server: --clickhouse_url (else $NRTPROF_CLICKHOUSE_URL), --clickhouse_database (default
// nrtprof), --clickhouse_user with --clickhouse_password_file.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/commands.h"
#include "client/flags.h"
#include "common/clickhouse_http.h"
#include "common/json_text.h"
#include "trace/atomic_file.h"
#include "trace/pprof_export.h"
#include "trace/summary.h"

ABSL_DECLARE_FLAG(std::string, format);  // command_summary.cc
ABSL_DECLARE_FLAG(int, limit);           // command_summary.cc
ABSL_DECLARE_FLAG(std::string, o);       // command_report.cc

ABSL_FLAG(std::string, clickhouse_url, "",
          "the fleet store's ClickHouse server, http://HOST:8123 (default "
          "$NRTPROF_CLICKHOUSE_URL)");
ABSL_FLAG(std::string, clickhouse_database, "nrtprof", "the fleet store's database");
ABSL_FLAG(std::string, clickhouse_user, "",
          "the ClickHouse user, with --clickhouse_password_file (default: the server's default "
          "user)");
ABSL_FLAG(std::string, clickhouse_password_file, "",
          "file of one line: the ClickHouse user's password (mode 0600)");
ABSL_FLAG(absl::Duration, since, absl::Hours(1), "how far back fleet top looks (1h, 30m, 2h30m)");
ABSL_FLAG(std::string, by, "op",
          "what fleet top ranks: op, model, host or process (a host's pid and executable)");
ABSL_FLAG(std::string, where, "",
          "fleet top only over rows with KEY=VALUE (host, pid, executable, model, op); repeat "
          "for several");

namespace nrtprof::cli {
namespace {

int Fail(const std::string& line, int code = 1) {
  fprintf(stderr, "nrtprof fleet: %s\n", line.c_str());
  return code;
}

// The columns each --by groups on.
bool GroupColumns(const std::string& by, std::vector<std::string>* columns) {
  if (by == "op" || by == "model" || by == "host") {
    *columns = {by};
  } else if (by == "process") {
    *columns = {"host", "pid", "executable"};
  } else {
    return false;
  }
  return true;
}

// absl keeps only the last of a repeated flag: every --where is gathered here first, and
// taken out of argv.
std::vector<std::string> TakeWheres(int* argc, char** argv) {
  std::vector<std::string> wheres;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--") {
      while (i < *argc) argv[out++] = argv[i++];
      break;
    }
    if ((a == "--where" || a == "-where") && i + 1 < *argc) {
      wheres.push_back(argv[++i]);
    } else if (absl::StartsWith(a, "--where=") || absl::StartsWith(a, "-where=")) {
      wheres.push_back(std::string(a.substr(a.find('=') + 1)));
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return wheres;
}

// --where KEY=VALUE as a condition.
absl::StatusOr<std::string> Condition(const std::string& where) {
  const size_t eq = where.find('=');
  const std::string key = where.substr(0, eq);
  static const std::vector<std::string> kKeys = {"host", "pid", "executable", "model", "op"};
  if (eq == std::string::npos || std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--where '", where, "' is not KEY=VALUE with KEY host, pid, executable, model or op"));
  }
  const std::string value = where.substr(eq + 1);
  if (key == "pid") {
    uint32_t pid = 0;
    if (!absl::SimpleAtoi(value, &pid)) {
      return absl::InvalidArgumentError(absl::StrCat("--where pid='", value, "' is not a pid"));
    }
    return absl::StrCat("pid = ", pid);
  }
  return absl::StrCat(key, " = ", ClickHouseQuote(value));
}

// A TabSeparated field back to its text (ClickHouse escapes \t, \n, \\ and a few more).
std::string Unescape(absl::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\' || i + 1 == field.size()) {
      out += field[i];
      continue;
    }
    const char c = field[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == '0' ? '\0' : c;
  }
  return out;
}

struct TopRow {
  std::vector<std::string> key;  // the --by columns' values
  uint64_t calls = 0, device_ns = 0, host_ns = 0, executions = 0, hosts = 0;
};

absl::StatusOr<ClickHouseConfig> ServerFromFlags() {
  ClickHouseConfig config;
  config.url = absl::GetFlag(FLAGS_clickhouse_url);
  if (config.url.empty()) {
    const char* env = getenv("NRTPROF_CLICKHOUSE_URL");
    config.url = env == nullptr ? "" : env;
  }
  if (config.url.empty()) {
    return absl::InvalidArgumentError(
        "no fleet store: give --clickhouse_url http://HOST:8123 (or set NRTPROF_CLICKHOUSE_URL)");
  }
  if (absl::Status s = CheckClickHouseUrl(config.url, "--clickhouse_url"); !s.ok()) return s;
  config.database = absl::GetFlag(FLAGS_clickhouse_database);
  config.user = absl::GetFlag(FLAGS_clickhouse_user);
  const std::string password_file = absl::GetFlag(FLAGS_clickhouse_password_file);
  if (config.user.empty() != password_file.empty()) {
    return absl::InvalidArgumentError(
        "--clickhouse_user and --clickhouse_password_file go together");
  }
  if (!password_file.empty()) {
    absl::StatusOr<std::string> password = ReadClickHousePassword(password_file);
    if (!password.ok()) return absl::InvalidArgumentError(password.status().message());
    config.password = *std::move(password);
  }
  return config;
}

// From the per-minute sums (fleet_ops_by_minute), the minutes from the one `since_s` ago, in
// one pass: the groups, and (WITH TOTALS, computed before LIMIT) the sums over all of them, a
// last line after an empty one. uniq(host): exact up to 65536 hosts (bar a hash
// collision), and much cheaper than uniqExact's strings.
std::string TopSql(const std::vector<std::string>& columns, const std::vector<std::string>& conds,
                   int64_t since_s, int limit) {
  const std::string keys = absl::StrJoin(columns, ", ");
  return absl::StrCat("SELECT ", keys,
                      ", sum(calls) AS c, sum(device_ns) AS d, sum(host_ns) AS h, "
                      "sum(executions) AS e, uniq(host) AS n FROM fleet_ops_by_minute "
                      "WHERE minute >= toStartOfMinute(now() - ",
                      since_s, ")", conds.empty() ? "" : " AND ", absl::StrJoin(conds, " AND "),
                      " GROUP BY ", keys, " WITH TOTALS ORDER BY d DESC, ", keys,
                      limit > 0 ? absl::StrCat(" LIMIT ", limit) : "", " FORMAT TabSeparated");
}

std::string PerCall(uint64_t ns, uint64_t calls) {
  return calls == 0 ? "-" : daemon::FormatDuration(ns / calls);
}

std::string FormatTop(const std::string& format, const std::vector<std::string>& columns,
                      const std::vector<TopRow>& rows, uint64_t total, int64_t since_s) {
  std::string out;
  if (format == "csv") {
    out = absl::StrCat(absl::StrJoin(columns, ","),
                       ",calls,device_ns,host_ns,executions,hosts\n");
    for (const TopRow& r : rows) {
      std::vector<std::string> key;
      for (const std::string& k : r.key) key.push_back(daemon::CsvField(k));
      absl::StrAppend(&out, absl::StrJoin(key, ","), ",", r.calls, ",", r.device_ns, ",",
                      r.host_ns, ",", r.executions, ",", r.hosts, "\n");
    }
  } else if (format == "json") {
    absl::StrAppend(&out, "{\n  \"since_s\": ", since_s, ",\n  \"device_total_ns\": ", total,
                    ",\n  \"rows\": [");
    for (size_t i = 0; i < rows.size(); ++i) {
      const TopRow& r = rows[i];
      absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "    {");
      for (size_t k = 0; k < columns.size(); ++k) {
        absl::StrAppend(&out, JsonString(columns[k]), ": ",
                        columns[k] == "pid" ? r.key[k] : JsonString(r.key[k]), ", ");
      }
      absl::StrAppend(&out, "\"calls\": ", r.calls, ", \"device_ns\": ", r.device_ns,
                      ", \"host_ns\": ", r.host_ns, ", \"executions\": ", r.executions,
                      ", \"hosts\": ", r.hosts, "}");
    }
    absl::StrAppend(&out, "\n  ]\n}\n");
  } else {
    // By model (without op), an op's calls are charged to the model it spent most device time
    // in: a count that means nothing per model (issue 36). The model's own count is its
    // executions, and its time per execution. Ops with no device time have no model: said so.
    const auto has = [&](absl::string_view c) {
      return std::find(columns.begin(), columns.end(), c) != columns.end();
    };
    const bool by_model = has("model") && !has("op");
    const auto model_column = std::find(columns.begin(), columns.end(), "model") - columns.begin();
    std::vector<std::string> names;
    size_t width = 4;
    for (const TopRow& r : rows) {
      std::vector<std::string> key = r.key;
      if (static_cast<size_t>(model_column) < key.size() && key[model_column].empty()) {
        key[model_column] = "(no device time)";
      }
      names.push_back(absl::StrJoin(key, " "));
      width = std::max(width, std::min<size_t>(names.back().size(), 60));
    }
    const std::string header = absl::StrJoin(columns, " ");
    width = std::max(width, header.size());
    if (by_model) {
      absl::StrAppend(&out, absl::StrFormat("%*s  %12s  %8s  %10s  %12s  %12s  %5s\n",
                                            static_cast<int>(width), header, "NEURON",
                                            "NEURON %", "Executions", "per exec", "Self CPU",
                                            "Hosts"));
    } else {
      absl::StrAppend(&out, absl::StrFormat("%*s  %12s  %8s  %10s  %12s  %12s  %10s  %5s\n",
                                            static_cast<int>(width), header, "NEURON",
                                            "NEURON %", "Calls", "per call", "Self CPU",
                                            "Executions", "Hosts"));
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const TopRow& r = rows[i];
      std::string name = names[i].size() > width ? names[i].substr(0, width - 3) + "..." : names[i];
      const double share = total == 0 ? 0.0 : 100.0 * r.device_ns / total;
      if (by_model) {
        absl::StrAppend(&out, absl::StrFormat("%*s  %12s  %7.2f%%  %10d  %12s  %12s  %5d\n",
                                              static_cast<int>(width), name,
                                              daemon::FormatDuration(r.device_ns), share,
                                              r.executions, PerCall(r.device_ns, r.executions),
                                              daemon::FormatDuration(r.host_ns), r.hosts));
        continue;
      }
      absl::StrAppend(
          &out, absl::StrFormat("%*s  %12s  %7.2f%%  %10d  %12s  %12s  %10d  %5d\n",
                                static_cast<int>(width), name, daemon::FormatDuration(r.device_ns),
                                share, r.calls, PerCall(r.device_ns, r.calls),
                                daemon::FormatDuration(r.host_ns), r.executions, r.hosts));
    }
    absl::StrAppend(&out, "NEURON time total, last ", absl::FormatDuration(absl::Seconds(since_s)),
                    ": ", daemon::FormatDuration(total), "\n");
  }
  return out;
}

int Top(ClickHouseClient* client, const std::vector<std::string>& wheres) {
  std::vector<std::string> columns;
  if (!GroupColumns(absl::GetFlag(FLAGS_by), &columns)) {
    return Fail(absl::StrCat("--by '", absl::GetFlag(FLAGS_by),
                             "' is not op, model, host or process"), 2);
  }
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "text" && format != "csv" && format != "json") {
    return Fail(absl::StrCat("--format '", format, "' is not text, csv or json"), 2);
  }
  const int limit = absl::GetFlag(FLAGS_limit);
  if (limit < 0) return Fail("--limit must not be negative", 2);
  const int64_t since_s = absl::ToInt64Seconds(absl::GetFlag(FLAGS_since));
  if (since_s < 1) return Fail("--since must be at least 1s", 2);
  std::vector<std::string> conds;
  for (const std::string& w : wheres) {
    absl::StatusOr<std::string> c = Condition(w);
    if (!c.ok()) return Fail(std::string(c.status().message()), 2);
    conds.push_back(*std::move(c));
  }
  absl::StatusOr<std::string> answer = client->Run(TopSql(columns, conds, since_s, limit));
  if (!answer.ok()) return Fail(std::string(answer.status().message()));
  const size_t k = columns.size();
  auto parse = [k](absl::string_view line, TopRow* r) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    if (f.size() != k + 5 || !absl::SimpleAtoi(f[k], &r->calls) ||
        !absl::SimpleAtoi(f[k + 1], &r->device_ns) || !absl::SimpleAtoi(f[k + 2], &r->host_ns) ||
        !absl::SimpleAtoi(f[k + 3], &r->executions) || !absl::SimpleAtoi(f[k + 4], &r->hosts)) {
      return false;
    }
    for (size_t i = 0; i < k; ++i) r->key.push_back(Unescape(f[i]));
    return true;
  };
  // The groups, an empty line, the totals.
  const std::vector<absl::string_view> parts = absl::StrSplit(*answer, absl::MaxSplits("\n\n", 1));
  std::vector<TopRow> rows;
  for (absl::string_view line : absl::StrSplit(parts[0], '\n', absl::SkipEmpty())) {
    TopRow r;
    if (!parse(line, &r)) {
      return Fail(absl::StrCat("ClickHouse's answer is not fleet_ops' rows: '", line,
                               "' (is the database the fleet store's?)"));
    }
    rows.push_back(std::move(r));
  }
  TopRow totals;
  if (parts.size() == 2 && !parse(absl::StripSuffix(parts[1], "\n"), &totals)) {
    return Fail(absl::StrCat("ClickHouse's totals are not fleet_ops' sums: '", parts[1], "'"));
  }
  const uint64_t total = totals.device_ns;
  if (rows.empty() && format == "text") {
    printf("no rows in the fleet store in the last %s%s\n",
           absl::FormatDuration(absl::Seconds(since_s)).c_str(),
           conds.empty() ? "" : absl::StrCat(" where ", absl::StrJoin(wheres, ", ")).c_str());
    return 0;
  }
  fputs(FormatTop(format, columns, rows, total, since_s).c_str(), stdout);
  return 0;
}

// fleet export: the sums of the last --since per host, process, op and model as one profile,
// each stack model > op (the op alone when it ran no model), host and pid its labels.
int Export(ClickHouseClient* client, const std::vector<std::string>& wheres) {
  // --format is shared with summary and fleet top, whose default ("text") is no export format.
  const std::string format = FlagGiven("format") ? absl::GetFlag(FLAGS_format) : "pprof";
  if (format != "pprof" && format != "collapsed") {
    return Fail(absl::StrCat("fleet export: --format '", format, "' is not pprof or collapsed"), 2);
  }
  const std::string out = absl::GetFlag(FLAGS_o);
  if (out.empty()) return Fail("fleet export: say where with -o FILE (FILE.pb.gz: gzipped)", 2);
  const int64_t since_s = absl::ToInt64Seconds(absl::GetFlag(FLAGS_since));
  if (since_s < 1) return Fail("--since must be at least 1s", 2);
  std::vector<std::string> conds;
  for (const std::string& w : wheres) {
    absl::StatusOr<std::string> c = Condition(w);
    if (!c.ok()) return Fail(std::string(c.status().message()), 2);
    conds.push_back(*std::move(c));
  }
  const std::string sql = absl::StrCat(
      "SELECT host, pid, op, model, sum(device_ns), sum(host_ns), sum(executions) "
      "FROM fleet_ops_by_minute WHERE minute >= toStartOfMinute(now() - ", since_s, ")",
      conds.empty() ? "" : " AND ", absl::StrJoin(conds, " AND "),
      " GROUP BY host, pid, op, model ORDER BY host, pid, op, model FORMAT TabSeparated");
  absl::StatusOr<std::string> answer = client->Run(sql);
  if (!answer.ok()) return Fail(std::string(answer.status().message()));
  daemon::StackProfile profile;
  size_t rows = 0;
  for (absl::string_view line : absl::StrSplit(*answer, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    uint32_t pid = 0;
    int64_t device_ns = 0, host_ns = 0, executions = 0;
    if (f.size() != 7 || !absl::SimpleAtoi(f[1], &pid) || !absl::SimpleAtoi(f[4], &device_ns) ||
        !absl::SimpleAtoi(f[5], &host_ns) || !absl::SimpleAtoi(f[6], &executions)) {
      return Fail(absl::StrCat("ClickHouse's answer is not fleet_ops' rows: '", line,
                               "' (is the database the fleet store's?)"));
    }
    std::vector<std::string> stack;
    if (!f[3].empty()) stack.push_back(Unescape(f[3]));
    stack.push_back(Unescape(f[2]));
    profile.AddStack(stack, Unescape(f[0]), pid, 0, "", -1, device_ns, host_ns, executions);
    ++rows;
  }
  std::string bytes =
      format == "pprof" ? profile.ToPprof().SerializeAsString() : profile.ToCollapsed();
  if (absl::EndsWith(out, ".gz")) bytes = daemon::Gzip(bytes);
  daemon::AtomicFile file;
  absl::Status written = file.Open(out);
  if (written.ok()) written = file.Append(bytes);
  if (written.ok()) written = file.Commit();
  if (!written.ok()) return Fail(absl::StrCat("cannot write ", out, ": ", written.message()));
  fprintf(stderr, "nrtprof fleet export: %s (%s, %zu rows of the last %s: device time %s)\n",
          out.c_str(), format.c_str(), rows, absl::FormatDuration(absl::Seconds(since_s)).c_str(),
          daemon::FormatDuration(profile.Total(daemon::StackProfile::kDeviceNs)).c_str());
  return 0;
}

}  // namespace

int FleetCommand(int argc, char** argv) {
  const std::vector<std::string> wheres = TakeWheres(&argc, argv);
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string what = args.size() > 1 ? args[1] : "";
  if (what != "top" && what != "query" && what != "export") {
    return Fail(what.empty() ? "say what: nrtprof fleet top [FLAGS] or nrtprof fleet query SQL"
                             : absl::StrCat("unknown '", what, "': it is fleet top or fleet query"),
                2);
  }
  if ((what == "top" || what == "export") && args.size() > 2) {
    return Fail(absl::StrCat("fleet ", what, ": unexpected argument '", args[2], "'"), 2);
  }
  if (what == "query" && args.size() != 3) {
    return Fail("usage: nrtprof fleet query \"SQL\" (one argument: quote the query)", 2);
  }
  if (what == "query" && !wheres.empty()) return Fail("--where is for fleet top", 2);
  absl::StatusOr<ClickHouseConfig> server = ServerFromFlags();
  if (!server.ok()) return Fail(std::string(server.status().message()), 2);
  ClickHouseClient client(*std::move(server));
  if (what == "top") return Top(&client, wheres);
  if (what == "export") return Export(&client, wheres);
  absl::StatusOr<std::string> answer = client.Run(args[2], "", 60'000);
  if (!answer.ok()) return Fail(std::string(answer.status().message()));
  fputs(answer->c_str(), stdout);
  return 0;
}

}  // namespace nrtprof::cli
