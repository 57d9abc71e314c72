// `nrtprof fleet top|query`: reads the fleet store, the ClickHouse tables nrtprofd
// --clickhouse_url fills (docs/fleet.md, docs/fleet_schema.sql).
//
//   nrtprof fleet top [--since 1h] [--by op|model|host|process|rank] [--where KEY=VALUE]...
//                     [--limit N] [--format text|csv|json]
//       the device time, calls and host time of the fleet's ops (models, hosts, processes) in
//       the last --since, most device time first;
//   nrtprof fleet top --by rank [--since 1h] [--where KEY=VALUE]... [--limit N] [--format ...]
//       the ranks of the fleet's distributed jobs (fleet_ranks): each one's collective wait, and
//       what it made the others of its job wait (a rank that waited least of its job in a
//       minute was that minute's late rank; docs/fleet.md), the slowest first;
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
#include "absl/strings/ascii.h"
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
#include "common/terminal_text.h"
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
ABSL_FLAG(absl::Duration, since, absl::Hours(1),
          "how far back fleet top and fleet export look (1h, 30m, 2h30m)");
ABSL_FLAG(std::string, by, "op",
          "what fleet top ranks: op, model, host, process (a host's pid and executable) or rank "
          "(the ranks of distributed jobs by what they made the others wait)");
ABSL_FLAG(std::string, where, "",
          "only the rows with KEY=VALUE (host, pid, executable, model, op; fleet top --by rank: "
          "host, pid, executable, rank, job); repeat for several");

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

// --where KEY=VALUE as a condition (--by rank: its own keys).
absl::StatusOr<std::string> Condition(const std::string& where, bool by_rank = false) {
  const size_t eq = where.find('=');
  const std::string key = where.substr(0, eq);
  static const std::vector<std::string> kKeys = {"host", "pid", "executable", "model", "op"};
  static const std::vector<std::string> kRankKeys = {"host", "pid", "executable", "rank", "job"};
  const std::vector<std::string>& keys = by_rank ? kRankKeys : kKeys;
  if (eq == std::string::npos || std::find(keys.begin(), keys.end(), key) == keys.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--where '", where, "' is not KEY=VALUE with KEY ",
                     by_rank ? "host, pid, executable, rank or job (with --by rank)"
                             : "host, pid, executable, model or op"));
  }
  const std::string value = where.substr(eq + 1);
  if (key == "rank") {
    int rank = -1;
    if (!absl::SimpleAtoi(value, &rank) || rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--where rank='", value, "' is not a rank"));
    }
    return absl::StrCat("rank = ", rank);
  }
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
      // Jobs, executables, model and op names are what the processes sent: visible text only.
      names.push_back(TerminalText(absl::StrJoin(key, " ")));
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
      const std::string name = TerminalTextClipped(names[i], width);
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

// fleet top --by rank: a rank of a distributed job (fleet_ranks) over the last --since.
struct RankRow {
  std::string host, executable, job;
  uint32_t pid = 0;
  int64_t rank = -1;
  uint64_t collectives = 0, wait_ns = 0;
  uint64_t minutes = 0;       // minutes it was compared in: its job had 2+ ranks reporting
  uint64_t late_minutes = 0;  // of them, those it waited least of its job: its late minutes
  uint64_t made_wait_ns = 0;  // in those, what the job's other ranks waited beyond it
};

// Per minute and job, the ranks' waits (the minute's exports summed); a rank that waited the
// least of its job's ranks (two or more) that minute was its late rank, and what the others
// waited beyond it, sum(w) - ranks * min(w), is what its lateness cost them. In one pass of
// arrays (ClickHouse 18.16 has no window functions): each minute's ranks gathered, the least
// found, the ranks taken out again (ARRAY JOIN), and summed per rank. --where picks ranks after
// that, so a rank is compared with its whole job, whatever is shown. A minute in which a rank
// was its job's only one reporting (its last export fell a minute after the others') compares
// it with nobody: it is not among its minutes, so a straggler reads late in N of N.
std::string RankTopSql(const std::vector<std::string>& conds, int64_t since_s, int limit) {
  return absl::StrCat(
      "SELECT host, pid, executable, rank, job, sum(n) AS collectives, sum(w) AS wait_ns, "
      "sum(k > 1) AS minutes, sum(late) AS late_minutes, sum(if(late, sw - k * mn, 0)) AS made "
      "FROM (SELECT host, pid, executable, rank, job, n, w, sw, k, mn, k > 1 AND w = mn AS late "
      "FROM (SELECT minute, job, groupArray(host) AS hs, groupArray(pid) AS ps, "
      "groupArray(executable) AS es, groupArray(rank) AS rs, groupArray(n) AS ns, "
      "groupArray(w) AS ws, min(w) AS mn, sum(w) AS sw, count() AS k "
      "FROM (SELECT toStartOfMinute(time) AS minute, job, host, pid, executable, rank, "
      "sum(collectives) AS n, sum(wait_ns) AS w FROM fleet_ranks "
      "WHERE time >= toStartOfMinute(now() - ",
      since_s,
      ") GROUP BY minute, job, host, pid, executable, rank) GROUP BY minute, job) "
      "ARRAY JOIN hs AS host, ps AS pid, es AS executable, rs AS rank, ns AS n, ws AS w",
      conds.empty() ? "" : " WHERE ", absl::StrJoin(conds, " AND "),
      ") GROUP BY host, pid, executable, rank, job WITH TOTALS "
      "ORDER BY made DESC, late_minutes DESC, wait_ns, host, pid",
      limit > 0 ? absl::StrCat(" LIMIT ", limit) : "", " FORMAT TabSeparated");
}

bool ParseRankRow(absl::string_view line, RankRow* r) {
  const std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
  if (f.size() != 10 || !absl::SimpleAtoi(f[1], &r->pid) || !absl::SimpleAtoi(f[3], &r->rank) ||
      !absl::SimpleAtoi(f[5], &r->collectives) || !absl::SimpleAtoi(f[6], &r->wait_ns) ||
      !absl::SimpleAtoi(f[7], &r->minutes) || !absl::SimpleAtoi(f[8], &r->late_minutes) ||
      !absl::SimpleAtoi(f[9], &r->made_wait_ns)) {
    return false;
  }
  r->host = Unescape(f[0]);
  r->executable = Unescape(f[2]);
  r->job = Unescape(f[4]);
  return true;
}

std::string FormatRankTop(const std::string& format, const std::vector<RankRow>& rows,
                          const RankRow& totals, int64_t since_s) {
  std::string out;
  const auto rank = [](const RankRow& r) {
    return r.rank < 0 ? std::string("-") : std::to_string(r.rank);
  };
  if (format == "csv") {
    out = "host,pid,executable,rank,job,collectives,wait_ns,minutes,late_minutes,made_wait_ns\n";
    for (const RankRow& r : rows) {
      absl::StrAppend(&out, daemon::CsvField(r.host), ",", r.pid, ",",
                      daemon::CsvField(r.executable), ",", r.rank, ",", daemon::CsvField(r.job),
                      ",", r.collectives, ",", r.wait_ns, ",", r.minutes, ",", r.late_minutes, ",",
                      r.made_wait_ns, "\n");
    }
    return out;
  }
  if (format == "json") {
    absl::StrAppend(&out, "{\n  \"since_s\": ", since_s, ",\n  \"wait_total_ns\": ", totals.wait_ns,
                    ",\n  \"ranks\": [");
    for (size_t i = 0; i < rows.size(); ++i) {
      const RankRow& r = rows[i];
      absl::StrAppend(&out, i == 0 ? "\n" : ",\n", "    {\"host\": ", JsonString(r.host),
                      ", \"pid\": ", r.pid, ", \"executable\": ", JsonString(r.executable),
                      ", \"rank\": ", r.rank, ", \"job\": ", JsonString(r.job),
                      ", \"collectives\": ", r.collectives, ", \"wait_ns\": ", r.wait_ns,
                      ", \"minutes\": ", r.minutes, ", \"late_minutes\": ", r.late_minutes,
                      ", \"made_wait_ns\": ", r.made_wait_ns, "}");
    }
    absl::StrAppend(&out, "\n  ]\n}\n");
    return out;
  }
  size_t host_width = 4, job_width = 3;
  for (const RankRow& r : rows) {
    host_width = std::max(host_width, std::min<size_t>(TerminalText(r.host).size(), 40));
    job_width = std::max(job_width, std::min<size_t>(TerminalText(r.job).size(), 60));
  }
  // The host and the job as the processes named them, any bytes: visible text, cut to width.
  const auto cut = [](const std::string& s, size_t width) { return TerminalTextClipped(s, width); };
  absl::StrAppend(&out, absl::StrFormat("%*s  %7s  %4s  %11s  %12s  %14s  %13s  %16s  %s\n",
                                        static_cast<int>(host_width), "host", "pid", "rank",
                                        "Collectives", "Coll. wait", "per collective",
                                        "Late minutes", "Made others wait", "job"));
  for (const RankRow& r : rows) {
    absl::StrAppend(
        &out, absl::StrFormat("%*s  %7d  %4s  %11d  %12s  %14s  %5d of %-4d  %16s  %s\n",
                              static_cast<int>(host_width), cut(r.host, host_width), r.pid, rank(r),
                              r.collectives, daemon::FormatDuration(r.wait_ns),
                              PerCall(r.wait_ns, r.collectives), r.late_minutes, r.minutes,
                              daemon::FormatDuration(r.made_wait_ns), cut(r.job, job_width)));
  }
  absl::StrAppend(&out, "Collective wait total, last ",
                  absl::FormatDuration(absl::Seconds(since_s)), ": ",
                  daemon::FormatDuration(totals.wait_ns), " in ", totals.collectives,
                  " collectives of ", totals.minutes,
                  " rank-minutes. A rank's late minutes: those it waited least of its job's "
                  "ranks (it arrived last); made others wait: what they waited beyond it then\n");
  return out;
}

int RankTop(ClickHouseClient* client, const std::vector<std::string>& conds,
            const std::vector<std::string>& wheres, const std::string& format, int64_t since_s,
            int limit) {
  absl::StatusOr<std::string> answer = client->Run(RankTopSql(conds, since_s, limit));
  if (!answer.ok()) return Fail(std::string(answer.status().message()));
  const std::vector<absl::string_view> parts = absl::StrSplit(*answer, absl::MaxSplits("\n\n", 1));
  std::vector<RankRow> rows;
  for (absl::string_view line : absl::StrSplit(parts[0], '\n', absl::SkipEmpty())) {
    RankRow r;
    if (!ParseRankRow(line, &r)) {
      return Fail(absl::StrCat("ClickHouse's answer is not fleet_ranks' rows: '", line,
                               "' (is the database the fleet store's?)"));
    }
    rows.push_back(std::move(r));
  }
  RankRow totals;
  if (parts.size() == 2 && !ParseRankRow(absl::StripSuffix(parts[1], "\n"), &totals)) {
    return Fail(absl::StrCat("ClickHouse's totals are not fleet_ranks' sums: '", parts[1], "'"));
  }
  if (rows.empty() && format == "text") {
    printf("no ranks in the fleet store in the last %s%s (no process waited in collectives)\n",
           absl::FormatDuration(absl::Seconds(since_s)).c_str(),
           conds.empty() ? "" : absl::StrCat(" where ", absl::StrJoin(wheres, ", ")).c_str());
    return 0;
  }
  fputs(FormatRankTop(format, rows, totals, since_s).c_str(), stdout);
  return 0;
}

int Top(ClickHouseClient* client, const std::vector<std::string>& wheres) {
  std::vector<std::string> columns;
  const bool by_rank = absl::GetFlag(FLAGS_by) == "rank";
  if (!by_rank && !GroupColumns(absl::GetFlag(FLAGS_by), &columns)) {
    return Fail(absl::StrCat("--by '", absl::GetFlag(FLAGS_by),
                             "' is not op, model, host, process or rank"),
                2);
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
    absl::StatusOr<std::string> c = Condition(w, by_rank);
    if (!c.ok()) return Fail(std::string(c.status().message()), 2);
    conds.push_back(*std::move(c));
  }
  if (by_rank) return RankTop(client, conds, wheres, format, since_s, limit);
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
  // The window the sums cover, on the server's clock: from the minute --since ago to now.
  absl::StatusOr<std::string> window = client->Run(absl::StrCat(
      "SELECT toUnixTimestamp(toStartOfMinute(now() - ", since_s,
      ")), toUnixTimestamp(now()) FORMAT TabSeparated"));
  if (!window.ok()) return Fail(std::string(window.status().message()));
  const std::vector<absl::string_view> bounds =
      absl::StrSplit(absl::StripAsciiWhitespace(*window), '\t');
  int64_t from_s = 0, to_s = 0;
  if (bounds.size() != 2 || !absl::SimpleAtoi(bounds[0], &from_s) ||
      !absl::SimpleAtoi(bounds[1], &to_s)) {
    return Fail(absl::StrCat("ClickHouse's clock reads '", *window, "', not two times"));
  }
  daemon::StackProfile profile;
  profile.SetWindow(from_s * 1'000'000'000, (to_s - from_s) * 1'000'000'000);
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
    return Fail(what.empty()
                    ? "say what: nrtprof fleet top [FLAGS], fleet export -o FILE or fleet query SQL"
                    : absl::StrCat("unknown '", what,
                                   "': it is fleet top, fleet export or fleet query"),
                2);
  }
  if ((what == "top" || what == "export") && args.size() > 2) {
    return Fail(absl::StrCat("fleet ", what, ": unexpected argument '", args[2], "'"), 2);
  }
  if (what == "query" && args.size() != 3) {
    return Fail("usage: nrtprof fleet query \"SQL\" (one argument: quote the query)", 2);
  }
  if (what == "query" && !wheres.empty()) {
    return Fail("--where is for fleet top and fleet export (a query says its own WHERE)", 2);
  }
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
