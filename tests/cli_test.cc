// The nrtprof CLI as a new user meets it (issue 17's list): each command's own --help with its
// flags (generated from their definitions) and examples, --version, another command's flag refused in one line, usage errors exit 2, and a
// program given to `nrtprof run` without `--` keeps its own flags.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::Result;
using testing::RunProcess;
using testing::Runfile;

Result Nrtprof(const std::vector<std::string>& args) { return testing::RunNrtprof(args); }

size_t Lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

// The commands `nrtprof help` lists (its lines "  nrtprof NAME ..."), in its order.
std::vector<std::string> CommandsListed(const std::string& help) {
  std::vector<std::string> listed;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (absl::ConsumePrefix(&line, "  nrtprof ") && !absl::StartsWith(line, "--")) {
      listed.emplace_back(line.substr(0, line.find(' ')));
    }
  }
  return listed;
}

// A command's --help, its flags' part: each flag's name (as abseil names it) and its entry as one
// line, without the wrapping's line breaks and indents ("--limit N print only ...").
std::map<std::string, std::string> FlagEntries(const std::string& help) {
  std::map<std::string, std::string> entries;
  const size_t flags_at = help.find("\nflags:\n");
  if (flags_at == std::string::npos) return entries;
  std::string* entry = nullptr;
  for (absl::string_view line : absl::StrSplit(
           help.substr(flags_at + 8, help.find("\n\n", flags_at) - flags_at - 8), '\n')) {
    if (absl::string_view name = line; absl::ConsumePrefix(&name, "  -")) {
      absl::ConsumePrefix(&name, "-");
      entry = &entries[std::string(name.substr(0, name.find(' ')))];
    }
    if (entry == nullptr) continue;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      absl::StrAppend(entry, entry->empty() ? "" : " ", word);
    }
  }
  return entries;
}

TEST(CliTest, EachCommandHasItsOwnHelp) {
  const Result top = Nrtprof({"help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(top.out, "nrtprof capture (--duration D")) << top.out;
  for (absl::string_view line : absl::StrSplit(top.out, '\n')) {
    EXPECT_LE(line.size(), 100u) << line;
  }
  // Every command nrtprof has (export and captures were left out here).
  const std::vector<std::string> commands = CommandsListed(top.out);
  for (const char* command : {"export", "captures", "fleet"}) {
    EXPECT_NE(std::find(commands.begin(), commands.end(), command), commands.end())
        << command << " is not in\n" << top.out;
  }
  for (const std::string& command : commands) {
    const Result r = Nrtprof({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_TRUE(absl::StartsWith(r.out, "usage: nrtprof " + command)) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, "\nexamples:\n  nrtprof " + command)) << r.out;
    EXPECT_EQ(r.err, "") << command;
    // All of it in 100 columns: the synopsis, the flags, the notes and the examples.
    for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
      EXPECT_LE(line.size(), 100u) << command << ": " << line;
    }
    // The flags, generated from their definitions: each flag the synopsis names is there, once,
    // with its help. The synopsis goes on in the lines indented under its first.
    std::string usage;
    for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
      if (!usage.empty() && !absl::StartsWith(line, " ")) break;
      absl::StrAppend(&usage, line, " ");
    }
    const size_t flags_at = r.out.find("\nflags:\n");
    ASSERT_NE(flags_at, std::string::npos) << r.out;
    std::vector<std::string> listed;
    for (absl::string_view line : absl::StrSplit(
             r.out.substr(flags_at + 8, r.out.find("\n\n", flags_at) - flags_at - 8), '\n')) {
      if (absl::ConsumePrefix(&line, "  -")) {
        absl::ConsumePrefix(&line, "-");
        listed.emplace_back(line.substr(0, line.find(' ')));
      }
    }
    EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()).size(), listed.size()) << r.out;
    const std::regex named(R"( \[?\(?--?([a-z][a-z_-]*))");
    for (std::sregex_iterator it(usage.begin(), usage.end(), named), end; it != end; ++it) {
      std::string flag = (*it)[1];
      std::replace(flag.begin(), flag.end(), '-', '_');  // --device-profile is --device_profile
      EXPECT_NE(std::find(listed.begin(), listed.end(), flag), listed.end())
          << command << ": --" << flag << " is not in\n" << r.out;
    }
  }
  const Result version = Nrtprof({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "nrtprof 0.1.0\n");
}

// A flag several commands share is defined once; each command's --help says what it does there,
// not another command's meaning: summary's --limit said "diff's first rows are those that changed
// most", top's and capture's --iterations "capture: N whole training steps ...; top: stop after N
// refreshes", status's --addr what run does with it, run's --out what capture does.
TEST(CliTest, EachCommandsHelpSaysWhatASharedFlagDoesThere) {
  const std::vector<std::string> commands = CommandsListed(Nrtprof({"help"}).out);
  std::map<std::string, std::map<std::string, std::string>> flags;  // command -> flag -> entry
  for (const std::string& command : commands) {
    const Result r = Nrtprof({command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << command << ": " << r.err;
    flags[command] = FlagEntries(r.out);
    ASSERT_FALSE(flags[command].empty()) << r.out;
    // No flag's entry speaks of another command: "diff's", "capture:", "nrtprof capture". (A
    // capture's folder is what every command writes or reads, "pftrace,summary:" names file
    // kinds; fleet top and fleet export are fleet's own.)
    for (auto [flag, entry] : flags[command]) {
      if (command == "fleet") {
        entry = std::regex_replace(entry, std::regex("fleet (top|export|query)"), "fleet");
      }
      for (const std::string& other : commands) {
        if (other == command) continue;
        const std::regex mention("(^|[ (])(nrtprof " + other + "\\b|" + other + ":" +
                                 (other == "capture" ? "" : "|" + other + "'s") + ")");
        EXPECT_FALSE(std::regex_search(entry, mention))
            << "nrtprof " << command << " --help, --" << flag << " speaks of " << other << ": "
            << entry;
      }
    }
  }
  // And what each says is that command's meaning.
  EXPECT_TRUE(absl::StrContains(flags["diff"]["limit"], "changed most")) << flags["diff"]["limit"];
  for (const char* command : {"summary", "collectives", "fleet"}) {
    EXPECT_FALSE(absl::StrContains(flags[command]["limit"], "changed most"))
        << command << ": " << flags[command]["limit"];
  }
  EXPECT_TRUE(absl::StrContains(flags["collectives"]["limit"], "the first N collectives"))
      << flags["collectives"]["limit"];
  EXPECT_TRUE(absl::StrContains(flags["capture"]["iterations"], "N whole training steps"))
      << flags["capture"]["iterations"];
  EXPECT_FALSE(absl::StrContains(flags["capture"]["iterations"], "refreshes"))
      << flags["capture"]["iterations"];
  EXPECT_EQ(flags["top"]["iterations"],
            "--iterations N stop after N refreshes (0: until q or Ctrl-C) (default: 0)");
  EXPECT_TRUE(absl::StrContains(flags["run"]["addr"], "else a private daemon of run's own"))
      << flags["run"]["addr"];
  EXPECT_FALSE(absl::StrContains(flags["status"]["addr"], "private daemon"))
      << flags["status"]["addr"];
  EXPECT_TRUE(absl::StrContains(flags["fleet"]["format"], "fleet export: pprof or collapsed"))
      << flags["fleet"]["format"];
}

TEST(CliTest, UsageErrorsExit2InOneLine) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"status", "--sort", "name"},
            "nrtprof status: unknown flag --sort (it takes --json, --addr, --tls_ca, "
            "--token_file, --tls_cert, --tls_key; see nrtprof status --help)\n"},
           {{"summary", "x", "--bogus"}, "nrtprof summary: unknown flag --bogus"},
           {{"run", "--stacks", "abc", "--", "/bin/true"},
            "nrtprof run: bad value 'abc' for --stacks"},
           {{"capture", "--duration", "soon"}, "nrtprof capture: bad value 'soon' for --duration"},
           {{"run", "--files", "pdf", "--", "/bin/true"},
            "nrtprof run: --files: 'pdf' is not a kind of capture file (pftrace, json, summary, "
            "artifacts)\n"},
           {{"run", "--device-profile=maybe", "--", "/bin/true"},
            "nrtprof run: bad value 'maybe' for --device_profile"},
           {{"summary", "x", "--limit"}, "nrtprof summary: --limit needs a value"},
           {{"frobnicate"}, "nrtprof: unknown command 'frobnicate'"},
           {{"report"}, "nrtprof report: usage: nrtprof report CAPTURE_DIR [-o report.html]"},
           {{"report", "x", "--sort", "name"}, "nrtprof report: unknown flag --sort"},
           {{"collectives"}, "nrtprof collectives: usage: nrtprof collectives CAPTURE_DIR"},
           {{"collectives", "x", "--limit", "-1"},
            "nrtprof collectives: --limit must not be negative\n"},
           {{"report", "x", "--max_slices", "0"}, "nrtprof report: --max_slices must be at least 1"},
           {{"top", "--interval", "soon"}, "nrtprof top: bad value 'soon' for --interval"},
           {{"top", "extra"}, "nrtprof top: unexpected argument 'extra'"},
           {{"fleet", "top"},
            "nrtprof fleet: no fleet store: give --clickhouse_url http://HOST:8123 (or set "
            "NRTPROF_CLICKHOUSE_URL)\n"},
           {{"fleet", "top", "--clickhouse_url", "localhost:8123"},
            "nrtprof fleet: --clickhouse_url 'localhost:8123' is not an http:// or https:// URL"},
           {{"fleet", "top", "--clickhouse_url", "http://127.0.0.1:1", "--by", "rack"},
            "nrtprof fleet: --by 'rack' is not op, model, host, process or rank\n"},
           {{"fleet", "top", "--clickhouse_url", "http://127.0.0.1:1", "--where", "rack=4"},
            "nrtprof fleet: --where 'rack=4' is not KEY=VALUE with KEY host, pid, executable, "
            "model or op\n"},
           {{"fleet", "top", "--since", "soon"}, "nrtprof fleet: bad value 'soon' for --since"},
           {{"fleet", "query"}, "nrtprof fleet: usage: nrtprof fleet query \"SQL\""},
           {{"fleet", "drop"},
            "nrtprof fleet: unknown 'drop': it is fleet top, fleet export or fleet query\n"},
           {{"fleet"},
            "nrtprof fleet: say what: nrtprof fleet top [FLAGS], fleet export -o FILE or fleet "
            "query SQL\n"},
       }) {
    const Result r = Nrtprof(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
    EXPECT_TRUE(absl::StartsWith(r.err, c.says)) << r.err;
    EXPECT_EQ(Lines(r.err), 1u) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// A mistyped command's line names the commands there are: each that `nrtprof help` lists
// (`captures` was missing from it).
TEST(CliTest, AnUnknownCommandNamesEveryCommand) {
  const Result r = Nrtprof({"capture-list"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  const std::string prefix = "nrtprof: unknown command 'capture-list' (commands: ";
  ASSERT_TRUE(absl::StartsWith(r.err, prefix)) << r.err;
  const std::string named = r.err.substr(prefix.size(), r.err.find(';') - prefix.size());
  const std::vector<std::string> said = absl::StrSplit(named, ", ");
  const Result help = Nrtprof({"help"});
  EXPECT_EQ(said, CommandsListed(help.out)) << r.err << help.out;
}

// -o is shared by report and fleet export: fleet's --help said "the HTML file to write
// (default: CAPTURE_DIR/report.html)", report's meaning, for fleet export's profile.
TEST(CliTest, FleetHelpSaysWhatItsOutputFileIs) {
  const Result r = Nrtprof({"fleet", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t o = r.out.find("\n  -o ");
  ASSERT_NE(o, std::string::npos) << r.out;
  // Its help as one line, without the wrapping's line breaks and indents.
  const std::string help = absl::StrJoin(
      absl::StrSplit(r.out.substr(o + 1, r.out.find("\n  --", o + 1) - o - 1),
                     absl::ByAnyChar(" \n"), absl::SkipEmpty()),
      " ");
  EXPECT_TRUE(absl::StrContains(help, "fleet export: the profile, gzipped if it ends in .gz"))
      << help;
  EXPECT_FALSE(absl::StrContains(help, "HTML file")) << help;
  const Result report = Nrtprof({"report", "--help"});
  EXPECT_EQ(FlagEntries(report.out)["o"],
            "-o STRING the HTML page to write (default: CAPTURE_DIR/report.html)")
      << report.out;
}

// A duration without its unit (issue 36: `--duration 10` was "Illegal value '10' specified for
// flag 'duration'") says that a unit is needed, for every duration flag of every command.
TEST(CliTest, ADurationWithoutAUnitSaysSo) {
  struct Case {
    std::vector<std::string> args;
    std::string flag, value;
  };
  for (const Case& c : std::vector<Case>{
           {{"capture", "--duration", "10"}, "duration", "10"},
           {{"capture", "--last=30"}, "last", "30"},
           {{"capture", "--iterations", "5", "--step_timeout", "60"}, "step_timeout", "60"},
           {{"capture", "--iterations", "5", "--step-timeout", "1.5"}, "step_timeout", "1.5"},
           {{"top", "--interval", "2"}, "interval", "2"},
           {{"top", "--window", "5"}, "window", "5"},
           {{"fleet", "top", "--since", "1"}, "since", "1"},
       }) {
    const Result r = Nrtprof(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err, "nrtprof " + c.args[0] + ": --" + c.flag + " '" + c.value +
                         "' needs a unit, as " + c.value + "s, 500ms or 1m30s\n");
    EXPECT_EQ(r.out, "");
  }
  // Other nonsense says what a duration is, once.
  const Result r = Nrtprof({"capture", "--duration", "soon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "nrtprof capture: bad value 'soon' for --duration: a duration is a number and a unit, "
            "as 10s, 500ms or 1m30s\n");
}

// `nrtprof run --out DIR prog --flag value`: everything from prog on is the program's, as
// with time(1) or strace(1): it runs with its own flags, and nrtprof's table follows.
TEST(CliTest, RunWithoutDashesGivesTheProgramItsFlags) {
  const std::string out = testing::TempDir("cli-run") + "/cap";
  const Result plain = RunProcess(
      {Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "2"}, testing::kIsolatedEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const Result r = Nrtprof(
      {"run", "--out", out, Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);
  EXPECT_TRUE(absl::StrContains(r.err, "files in " + out + ":")) << r.err;
  // And its --help is its own, not nrtprof's.
  const Result help = Nrtprof({"run", "--out", out + "2", Runfile("examples/rmsnorm"), "--help"});
  EXPECT_FALSE(absl::StrContains(help.out, "usage: nrtprof run")) << help.out;
}

// Ctrl-C in a terminal signals the whole foreground group: nrtprof, the program and (before)
// the private daemon, which wrote the capture at once and lost what the program's handler did.
// Now the program finishes its handler, and everything it did is in the capture.
TEST(CliTest, CtrlCLetsTheProgramFinishAndWritesEverything) {
  const std::string dir = testing::TempDir("cli-ctrl-c");
  const std::string out = dir + "/cap";
  testing::Background run({Runfile("client/nrtprof"), "run", "--out", out, "--",
                           Runfile("tests/abrupt_end"), "sigint", "8000"},
                          testing::kIsolatedEnv, dir, /*own_group=*/true);
  for (int i = 0; i < 400 && !absl::StrContains(run.out(), "waiting for SIGINT"); ++i) {
    usleep(25'000);
  }
  ASSERT_TRUE(absl::StrContains(run.out(), "waiting for SIGINT")) << run.err();
  run.SignalGroup(SIGINT);
  EXPECT_EQ(run.Wait(), 130) << run.err();  // as the program exited
  EXPECT_TRUE(absl::StrContains(run.out(), "8001 runtime calls after SIGINT")) << run.out();
  EXPECT_TRUE(absl::StrContains(
      run.err(), "nrtprof run: interrupted (Ctrl-C): the program exited with 130; writing"))
      << run.err();
  EXPECT_FALSE(absl::StrContains(run.err(), "not written")) << run.err();
  auto calls = testing::CallsByName(out);
  EXPECT_EQ(calls["nrt_tensor_write"], 16000) << run.err();  // 8,000 before, 8,000 in the handler
  EXPECT_EQ(calls["nrt_close"], 1) << run.err();
  // No host event lost (the runtime's own trace ring may overflow under 16,000 writes in a
  // burst: device events, counted as device_overwritten).
  const std::string summary = testing::ReadFile(out + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "Events dropped: 0\n") ||
              absl::StrContains(summary, "by lane: framework 0, runtime 0, "))
      << summary;
}

// Two runs writing one folder at once: the second is refused in one line before its program
// runs (before, both reported success and the last writer won).
TEST(CliTest, AFolderInUseIsRefused) {
  const std::string dir = testing::TempDir("cli-in-use");
  const std::string out = dir + "/cap";
  testing::Background first({Runfile("client/nrtprof"), "run", "--out", out, "--",
                             Runfile("tests/abrupt_end"), "sigint", "10"},
                            testing::kIsolatedEnv, dir, /*own_group=*/true);
  for (int i = 0; i < 400 && !absl::StrContains(first.out(), "waiting for SIGINT"); ++i) {
    usleep(25'000);
  }
  ASSERT_TRUE(absl::StrContains(first.out(), "waiting for SIGINT")) << first.err();
  const Result second =
      Nrtprof({"run", "--out", out, "--", Runfile("tests/abrupt_end"), "exit", "10"});
  EXPECT_EQ(second.exit_code, 1) << second.err;
  EXPECT_TRUE(absl::StartsWith(second.err, "nrtprof run: cannot start a capture: " + out +
                                               " is in use by capture '"))
      << second.err;
  EXPECT_EQ(Lines(second.err), 1u) << second.err;
  EXPECT_EQ(second.out, "");  // its program never ran
  first.SignalGroup(SIGINT);
  EXPECT_EQ(first.Wait(), 130) << first.err();
  EXPECT_EQ(testing::CallsByName(out)["nrt_close"], 1);
}

// `nrtprof run --out DIR` leaves nothing behind but DIR: no empty ./nrtprof-captures where it
// ran, no private daemon's folder in /tmp.
TEST(CliTest, RunLeavesNothingButTheCapture) {
  const std::string cwd = testing::TempDir("cli-litter");
  const std::string out = testing::TempDir("cli-litter-out") + "/cap";
  const Result r = RunProcess(
      {"/bin/sh", "-c",
       "cd '" + cwd + "' && exec '" + Runfile("client/nrtprof") + "' run --out '" + out +
           "' -- '" + Runfile("examples/rmsnorm") + "' --variant fused --iters 1"},
      testing::kIsolatedEnv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(testing::Exists(cwd + "/nrtprof-captures")) << "litter in the current folder";
  const size_t at = r.err.find("(daemon unix:");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string socket = r.err.substr(at + 13, r.err.find(',', at) - at - 13);
  ASSERT_TRUE(absl::StartsWith(socket, "/tmp/nrtprof-run-")) << socket;
  EXPECT_FALSE(testing::Exists(socket.substr(0, socket.rfind('/')))) << "left " << socket;
  EXPECT_TRUE(testing::Exists(out + "/trace.pftrace"));
}

// `run --files`: the capture folder holds the kinds named, and nothing else.
TEST(CliTest, RunWritesOnlyTheFilesNamed) {
  const std::string out = testing::TempDir("cli-files") + "/cap";
  const Result r = Nrtprof({"run", "--files", "summary,pftrace", "--out", out, "--",
                            Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  if (DIR* d = opendir(out.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.insert(e->d_name);
    }
    closedir(d);
  }
  EXPECT_EQ(names, (std::set<std::string>{"trace.pftrace", "summary.txt", "summary.csv",
                                          "summary.json"}))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "Self NEURON time total")) << r.err;
}

// As a shell answers: 127 for a program that is not there, 126 for one that cannot be run; one
// line, nothing left behind.
TEST(CliTest, WhatCannotRunExitsAsAShellDoes) {
  const std::string dir = testing::TempDir("cli-not-runnable");
  const std::string script = dir + "/not-executable.sh";
  FILE* f = fopen(script.c_str(), "w");
  fputs("echo hi\n", f);
  fclose(f);
  struct Case {
    std::string program;
    int code;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {dir + "/absent", 127, "cannot run '" + dir + "/absent': no such file"},
           {"no-such-program-4711", 127, "cannot run 'no-such-program-4711': not found in PATH"},
           {script, 126, "cannot run '" + script + "': permission denied (not executable)"},
           {dir, 126, "cannot run '" + dir + "': is a folder"},
       }) {
    const Result r = Nrtprof({"run", "--out", dir + "/cap", "--", c.program});
    EXPECT_EQ(r.exit_code, c.code) << r.err;
    EXPECT_EQ(r.err, "nrtprof run: " + c.says + "\n");
    EXPECT_FALSE(testing::Exists(dir + "/cap"));
  }
  // And status with nobody there says how to have a daemon.
  const Result status = Nrtprof({"status", "--addr", "unix:/tmp/nrtprof-no-such-4711/d.sock"});
  EXPECT_EQ(status.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(status.err, "(start one with `nrtprofd &`")) << status.err;
  EXPECT_EQ(Lines(status.err), 1u) << status.err;
}

// An empty capture says why, where it can be known (before: "no process called libnrt" for
// every cause): the profiler never reached a statically linked program; it reached env, which
// started the program with its environment cleared. Its exit code is 3, not the program's 0
// (issue 36: a script could not tell it from a capture with something in it).
TEST(CliTest, AnEmptyCaptureSaysWhyWhereItCanBeKnown) {
  const std::string dir = testing::TempDir("cli-empty-why");
  Result r = Nrtprof({"run", "--out", dir + "/static", "--", "/sbin/ldconfig", "--version"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err, "nrtprof: the profiler never reached '/sbin/ldconfig': its shim was not loaded (a "
             "statically linked or setuid program ignores LD_PRELOAD"))
      << r.err;
  r = Nrtprof({"run", "--out", dir + "/env", "--", "/usr/bin/env", "-i",
               Runfile("examples/rmsnorm"), "--variant", "fused", "--iters", "1"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err, "nrtprof: no process of '/usr/bin/env' called libnrt: the capture is empty (the "
             "profiler reached env (pid "))
      << r.err;
  // A program that fails keeps its own exit code, empty capture or not.
  r = Nrtprof({"run", "--out", dir + "/failed", "--", "/bin/sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  // A program that does call libnrt gets neither line.
  r = Nrtprof({"run", "--out", dir + "/fine", "--", Runfile("examples/rmsnorm"), "--variant",
               "fused", "--iters", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "never reached")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "called libnrt")) << r.err;
}

// nrtprof diff: the RMSNorm demo's naive and compiled captures side by side, op by op, sorted by
// the change in device time, with the totals: one-sixth of the device time.
TEST(CliTest, DiffShowsWhereTheDeviceTimeWent) {
  const std::string dir = testing::TempDir("cli-diff");
  for (const char* variant : {"naive", "compiled"}) {
    const Result r = Nrtprof({"run", "--out", dir + "/" + variant, "--",
                              Runfile("examples/rmsnorm"), "--variant", variant, "--iters", "5"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const Result text = Nrtprof({"diff", dir + "/naive", dir + "/compiled"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // The largest change first: the six eager ops gone, one compiled kernel in their place.
  const size_t mul = text.out.find("aten::mul        18         0        6.616ms        0.000us");
  const size_t compiled = text.out.find(
      "CompiledFunction         0         6        0.000us        2.250ms              -      "
      "375.066us       +2.250ms");
  // A step's device time, as the summary's "NEURON time avg" gives it: one-sixth.
  EXPECT_TRUE(absl::StrContains(text.out, "ProfilerStep*         4         4        0.000us        "
                                          "0.000us        2.355ms      375.066us        0.000us"))
      << text.out;
  EXPECT_NE(mul, std::string::npos) << text.out;
  EXPECT_NE(compiled, std::string::npos) << text.out;
  EXPECT_LT(mul, compiled) << text.out;
  EXPECT_TRUE(absl::StrContains(text.out,
                                "Self NEURON time total: 15.517ms -> 2.867ms (-12.650ms, 0.18x)\n"))
      << text.out;
  const Result csv = Nrtprof({"diff", dir + "/naive", dir + "/compiled/summary.json", "--format",
                              "csv", "--limit", "1"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out,
            "name,calls_a,calls_b,self_device_ns_a,self_device_ns_b,self_device_change_ns,"
            "self_cpu_ns_a,self_cpu_ns_b,device_total_ns_a,device_total_ns_b\n" +
                csv.out.substr(csv.out.find('\n') + 1));
  EXPECT_TRUE(absl::StartsWith(csv.out.substr(csv.out.find('\n') + 1), "aten::mul,18,0,66156"))
      << csv.out;
  EXPECT_EQ(Lines(csv.out), 2u);
  const Result json = Nrtprof({"diff", dir + "/naive", dir + "/compiled", "--format", "json"});
  EXPECT_TRUE(absl::StrContains(json.out, "\"self_device_total_ns_b\": ")) << json.out;
  const Result bad = Nrtprof({"diff", dir + "/naive"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(Lines(bad.err), 1u);
  const Result absent = Nrtprof({"diff", dir + "/naive", dir + "/nothing"});
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_EQ(absent.err, "nrtprof diff: " + dir + "/nothing: no such file or folder\n");
}

// nrtprof report of a capture that is not there, or whose trace is damaged: one line, exit 1,
// no page written.
TEST(CliTest, ReportRefusesWhatIsNoCapture) {
  const std::string dir = testing::TempDir("cli-report");
  Result r = Nrtprof({"report", dir + "/nothing"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "nrtprof report: " + dir + "/nothing: no such file or folder\n");
  const Result run = Nrtprof({"run", "--out", dir + "/cap", "--", Runfile("examples/rmsnorm"),
                              "--variant", "fused", "--iters", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  r = Nrtprof({"report", dir + "/cap"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "nrtprof report: " + dir + "/cap/report.html (")) << r.err;
  const std::string page = testing::ReadFile(dir + "/cap/report.html");
  EXPECT_TRUE(absl::StrContains(page, "\"aten::rms_norm\"")) << "the op is not in the page";
  for (const char* fetch : {"<link", " src=", "url(", "import("}) {
    EXPECT_FALSE(absl::StrContains(page, fetch)) << "the page would fetch: " << fetch;
  }
  // A page that cannot be written there: the path and the system's reason, once (issue 36: "No
  // such file or directory: No such file or directory").
  for (const auto& [path, why] : std::vector<std::pair<std::string, std::string>>{
           {dir + "/no-such-folder/x.html", "No such file or directory"},
           {dir + "/cap/summary.json/x.html", "Not a directory"},
           {dir + "/cap", "Is a directory"}}) {
    r = Nrtprof({"report", dir + "/cap", "-o", path});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "nrtprof report: cannot write " + path + ": " + why + "\n");
  }
  FILE* f = fopen((dir + "/cap/trace.pftrace").c_str(), "w");
  fputs("not a trace", f);
  fclose(f);
  r = Nrtprof({"report", dir + "/cap", "-o", dir + "/damaged.html"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Lines(r.err), 1u) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "the capture is damaged")) << r.err;
  EXPECT_FALSE(testing::Exists(dir + "/damaged.html"));
}

// --from-trace recomputes the table from trace.pftrace alone: the same table the capture wrote,
// and still there when the summary files are gone.
TEST(CliTest, SummaryFromTheTraceIsTheCapturesOwn) {
  const std::string out = testing::TempDir("cli-from-trace") + "/cap";
  const Result run = Nrtprof({"run", "--out", out, "--", Runfile("examples/rmsnorm"), "--variant",
                              "naive", "--iters", "3"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Result saved = Nrtprof({"summary", out, "--sort", "calls"});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_TRUE(absl::StrContains(saved.out, "aten::mul")) << saved.out;
  const Result recomputed = Nrtprof({"summary", out + "/trace.pftrace", "--from-trace", "--sort",
                                     "calls"});
  ASSERT_EQ(recomputed.exit_code, 0) << recomputed.err;
  EXPECT_EQ(recomputed.out, saved.out);
  ASSERT_EQ(unlink((out + "/summary.json").c_str()), 0);
  EXPECT_EQ(Nrtprof({"summary", out}).exit_code, 1);
  const Result without_json = Nrtprof({"summary", out, "--from-trace", "--sort", "calls"});
  EXPECT_EQ(without_json.exit_code, 0) << without_json.err;
  EXPECT_EQ(without_json.out, saved.out);
}

// Long work shows progress on a terminal only, and --quiet leaves only what is wrong: a pipe
// never gets a carriage return or an escape code.
TEST(CliTest, ProgressOnATerminalOnlyAndQuietMeansQuiet) {
  const std::string dir = testing::TempDir("cli-progress");
  const std::vector<std::string> program = {Runfile("examples/rmsnorm"), "--variant", "fused",
                                            "--iters", "2"};
  const Result plain = RunProcess(program, testing::kIsolatedEnv);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;

  std::vector<std::string> quiet = {"run", "--quiet", "--out", dir + "/quiet", "--"};
  quiet.insert(quiet.end(), program.begin(), program.end());
  const Result q = Nrtprof(quiet);
  EXPECT_EQ(q.exit_code, 0);
  EXPECT_EQ(q.out, plain.out);
  EXPECT_EQ(q.err, "");
  EXPECT_FALSE(testing::ReadFile(dir + "/quiet/summary.txt").empty());

  std::vector<std::string> piped = {"run", "--out", dir + "/piped", "--"};
  piped.insert(piped.end(), program.begin(), program.end());
  const Result p = Nrtprof(piped);
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(p.err, "aten::rms_norm")) << p.err;
  EXPECT_EQ(p.err.find('\r'), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find('\x1b'), std::string::npos) << p.err;

  // The same run on a terminal (script(1) gives it one): the line is drawn, then erased.
  std::string command = Runfile("client/nrtprof") + " run --out " + dir + "/tty --";
  for (const std::string& arg : program) command += " " + arg;
  const Result tty = RunProcess({"/usr/bin/script", "-qfec", command, "/dev/null"}, testing::kIsolatedEnv);
  EXPECT_EQ(tty.exit_code, 0) << tty.out << tty.err;
  const size_t drawn = tty.out.find("\rnrtprof: writing the capture... ");
  ASSERT_NE(drawn, std::string::npos) << tty.out;
  const size_t erased = tty.out.find("\r   ", drawn + 1);
  EXPECT_NE(erased, std::string::npos) << tty.out;
  EXPECT_LT(erased, tty.out.find("aten::rms_norm")) << tty.out;
  EXPECT_EQ(tty.out.find('\x1b'), std::string::npos) << tty.out;  // no colours, no escapes
}

// A capture whose trace does not read back is refused, not summarized as if it were whole
// (before: random bytes in place of trace.pftrace still printed the table).
TEST(CliTest, SummaryRefusesADamagedCapture) {
  const std::string out = testing::TempDir("cli-damaged") + "/cap";
  const Result run = Nrtprof({"run", "--out", out, "--", Runfile("examples/rmsnorm"), "--variant",
                              "fused", "--iters", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Result whole = Nrtprof({"summary", out});
  EXPECT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_TRUE(absl::StrContains(whole.out, "aten::rms_norm")) << whole.out;
  FILE* f = fopen((out + "/trace.pftrace").c_str(), "w");
  for (int i = 0; i < 4096; ++i) fputc((i * 7919 + 13) & 0xff, f);
  fclose(f);
  const Result damaged = Nrtprof({"summary", out});
  EXPECT_EQ(damaged.exit_code, 1);
  EXPECT_EQ(damaged.out, "");
  EXPECT_TRUE(absl::StartsWith(damaged.err, "nrtprof summary: " + out + "/trace.pftrace does not "
                                                 "read back as a Perfetto trace ("))
      << damaged.err;
  EXPECT_TRUE(absl::EndsWith(damaged.err, "): the capture is damaged\n")) << damaged.err;
  const Result recomputed = Nrtprof({"summary", out, "--from-trace"});
  EXPECT_EQ(recomputed.exit_code, 1);
  EXPECT_EQ(recomputed.err, damaged.err);
}

}  // namespace
}  // namespace nrtprof
