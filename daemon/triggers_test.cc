// The trigger rules' language (every form, every error with its column) and their evaluator over
// folded windows: rolling medians over N, absolute thresholds, status and exit rules, the rate
// limit and its suppressed count, and the reasons a capture will carry.
#include "daemon/triggers.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

// ---- The parser ----

TriggerRule Parsed(const std::string& text) {
  absl::StatusOr<TriggerRule> rule = ParseTriggerRule(text);
  EXPECT_TRUE(rule.ok()) << text << ": " << rule.status();
  return rule.ok() ? *rule : TriggerRule();
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<TriggerRule> rule = ParseTriggerRule(text);
  EXPECT_FALSE(rule.ok()) << text;
  return rule.ok() ? "" : std::string(rule.status().message());
}

TEST(TriggerRuleTest, TheIssuesRulesParse) {
  TriggerRule slow = Parsed("slow-step: step > 3 x median");
  EXPECT_EQ(slow.name, "slow-step");
  EXPECT_EQ(slow.subject, TriggerRule::Subject::kStep);
  EXPECT_DOUBLE_EQ(slow.factor, 3);
  EXPECT_EQ(slow.over, 100u);
  EXPECT_TRUE(slow.relative());
  EXPECT_EQ(slow.text, "slow-step: step > 3 x median");
  // The defaults.
  EXPECT_EQ(slow.before_ns, 10'000'000'000u);
  EXPECT_EQ(slow.after_ns, 2'000'000'000u);
  EXPECT_EQ(slow.every_ns, 300'000'000'000u);
  EXPECT_EQ(slow.files, 0u);
  EXPECT_EQ(slow.scope, TriggerRule::Scope::kJob);

  TriggerRule abs = Parsed("slow-step-abs: step > 250 ms");
  EXPECT_EQ(abs.subject, TriggerRule::Subject::kStep);
  EXPECT_FALSE(abs.relative());
  EXPECT_EQ(abs.threshold_ns, 250'000'000u);

  TriggerRule exec = Parsed("long-exec: execution > 5 x median");
  EXPECT_EQ(exec.subject, TriggerRule::Subject::kExecution);
  EXPECT_DOUBLE_EQ(exec.factor, 5);

  TriggerRule exec_abs = Parsed("long-exec-abs: execution > 20 ms");
  EXPECT_EQ(exec_abs.subject, TriggerRule::Subject::kExecution);
  EXPECT_EQ(exec_abs.threshold_ns, 20'000'000u);

  EXPECT_EQ(Parsed("errors: status != ok").subject, TriggerRule::Subject::kStatus);
  EXPECT_EQ(Parsed("crash: exit by signal").subject, TriggerRule::Subject::kExitBySignal);

  TriggerRule cc = Parsed("cc-wait: collective wait > 10 ms");
  EXPECT_EQ(cc.subject, TriggerRule::Subject::kCollectiveWait);
  EXPECT_EQ(cc.threshold_ns, 10'000'000u);
}

TEST(TriggerRuleTest, EverySettingAndUnit) {
  TriggerRule r = Parsed(
      "  Slow_2: step > 2.5x median over 50 before 10s after 2 s every 5m files pftrace,summary "
      "on process ");
  EXPECT_EQ(r.name, "slow_2");  // names are lower case
  EXPECT_DOUBLE_EQ(r.factor, 2.5);
  EXPECT_EQ(r.over, 50u);
  EXPECT_EQ(r.before_ns, 10'000'000'000u);
  EXPECT_EQ(r.after_ns, 2'000'000'000u);
  EXPECT_EQ(r.every_ns, 300'000'000'000u);
  EXPECT_EQ(r.files, (1u << nrtprof::CAPTURE_FILE_KIND_PFTRACE) |
                         (1u << nrtprof::CAPTURE_FILE_KIND_SUMMARY));
  EXPECT_EQ(r.scope, TriggerRule::Scope::kProcess);

  EXPECT_EQ(Parsed("a: step > 1500 us").threshold_ns, 1'500'000u);
  EXPECT_EQ(Parsed("a: step > 7 ns").threshold_ns, 7u);
  EXPECT_EQ(Parsed("a: step > .5 s").threshold_ns, 500'000'000u);
  EXPECT_EQ(Parsed("a: step > 1 h").threshold_ns, 3'600'000'000'000u);
  EXPECT_EQ(Parsed("a: step > 2 min").threshold_ns, 120'000'000'000u);
  EXPECT_EQ(Parsed("a: step > 1 S").threshold_ns, 1'000'000'000u);  // any case
  EXPECT_EQ(Parsed("a: status != ok every 1s").every_ns, 1'000'000'000u);
  EXPECT_EQ(Parsed("a: status != ok every 0s").every_ns, 0u);  // every anomaly
  EXPECT_EQ(Parsed("a: status != ok files json, artifacts").files,
            (1u << nrtprof::CAPTURE_FILE_KIND_JSON) |
                (1u << nrtprof::CAPTURE_FILE_KIND_ARTIFACTS));
  EXPECT_EQ(Parsed("a: exit by signal on job").scope, TriggerRule::Scope::kJob);
  EXPECT_EQ(Parsed("a: exit by signal before 0s").before_ns, 0u);
}

TEST(TriggerRuleTest, EachErrorNamesItsColumnAndWhatWasExpected) {
  EXPECT_EQ(ErrorOf(""), "column 1: expected the rule's name (as in 'slow-step: ...'), found the "
                         "end of the rule");
  EXPECT_EQ(ErrorOf("slow step > 3 x median"),
            "column 6: expected ':' after the rule's name, found 'step'");
  EXPECT_EQ(ErrorOf("slow: steps > 3 x median"),
            "column 7: expected a condition: 'step >', 'execution >', 'status != ok', 'exit by "
            "signal' or 'collective wait >', found 'steps'");
  EXPECT_EQ(ErrorOf("slow: step < 3 x median"),
            "column 12: expected '>' after 'step', found '<'");
  EXPECT_EQ(ErrorOf("slow: step > 3 median"),
            "column 16: expected 'x median' or a unit (ns, us, ms, s, m, h) after 3, found "
            "'median'");
  EXPECT_EQ(ErrorOf("slow: step > x median"),
            "column 14: expected a number: a factor (as in '3 x median') or a time (as in "
            "'250 ms'), found 'x'");
  EXPECT_EQ(ErrorOf("slow: step > 3 x mean"),
            "column 18: expected 'median' (as in '3 x median'), found 'mean'");
  EXPECT_EQ(ErrorOf("slow: step > 1 x median"), "column 14: expected a factor above 1, found '1'");
  EXPECT_EQ(ErrorOf("slow: step > 3 x median over 0"),
            "column 30: expected a count of 1 to 10000 (as in 'over 50'), found '0'");
  EXPECT_EQ(ErrorOf("slow: step > 3 x median over"),
            "column 29: expected a count of 1 to 10000 (as in 'over 50'), found the end of the "
            "rule");
  EXPECT_EQ(ErrorOf("slow: step > 0 ms"), "column 14: expected a time above 0, found '0'");
  EXPECT_EQ(ErrorOf("slow: step > 250 parsecs"),
            "column 18: expected 'x median' or a unit (ns, us, ms, s, m, h) after 250, found "
            "'parsecs'");
  EXPECT_EQ(ErrorOf("e: status = ok"),
            "column 11: expected '!=' after 'status' (as in 'status != ok'), found '='");
  EXPECT_EQ(ErrorOf("e: status != ok; x"), "column 16: unexpected character ';' (a rule is "
                                           "NAME: CONDITION [SETTING]..., see docs/triggers.md)");
  EXPECT_EQ(ErrorOf("e: status != fine"),
            "column 14: expected 'ok' (as in 'status != ok'), found 'fine'");
  EXPECT_EQ(ErrorOf("e: status > ok"),
            "column 11: expected '!=' after 'status' (as in 'status != ok'), found '>'");
  EXPECT_EQ(ErrorOf("c: exit with signal"),
            "column 9: expected 'by' (as in 'exit by signal'), found 'with'");
  EXPECT_EQ(ErrorOf("c: exit by sigkill"),
            "column 12: expected 'signal' (as in 'exit by signal'), found 'sigkill'");
  EXPECT_EQ(ErrorOf("w: collective > 10 ms"),
            "column 15: expected 'wait' (as in 'collective wait > 10 ms'), found '>'");
  EXPECT_EQ(ErrorOf("w: collective wait 10 ms"),
            "column 20: expected '>' after 'collective wait', found '10'");
  EXPECT_EQ(ErrorOf("w: collective wait > 3 x median"),
            "column 24: expected a unit (ns, us, ms, s, m, h) after 3, found 'x'");
  EXPECT_EQ(ErrorOf("e: status != ok sometimes"),
            "column 17: expected a setting ('before', 'after', 'every', 'files', 'on') or the "
            "end of the rule, found 'sometimes'");
  EXPECT_EQ(ErrorOf("e: status != ok before"),
            "column 23: expected a time after 'before' (as in 'before 10s'), found the end of "
            "the rule");
  EXPECT_EQ(ErrorOf("e: status != ok before 10"),
            "column 26: expected a unit (ns, us, ms, s, m, h) after 10, found the end of the "
            "rule");
  EXPECT_EQ(ErrorOf("e: status != ok before 2h"),
            "column 24: expected a look-back of at most 1 h, found '2'");
  EXPECT_EQ(ErrorOf("e: status != ok after 2m"),
            "column 23: expected a look-ahead of at most 60 s, found '2'");
  EXPECT_EQ(ErrorOf("e: status != ok every 1s every 2s"),
            "column 26: expected each setting once ('every' came before), found 'every'");
  EXPECT_EQ(ErrorOf("e: status != ok files pftrace,html"),
            "column 31: expected a kind of file: pftrace, json, summary or artifacts, found "
            "'html'");
  EXPECT_EQ(ErrorOf("e: status != ok on host"),
            "column 20: expected 'process' or 'job' after 'on', found 'host'");
  EXPECT_EQ(ErrorOf("a-very-long-name-that-goes-on-and-on-and-on-and-on-x: status != ok"),
            "column 1: expected a name of at most 48 characters, found "
            "'a-very-long-name-that-goes-on-and-on-and-on-and-on-x'");
}

TEST(TriggerRuleTest, AListOfRulesNamesTheBadOneAndRefusesTwoOfOneName) {
  absl::StatusOr<std::vector<TriggerRule>> rules =
      ParseTriggerRules({"a: status != ok", "b: step > 3 x median"});
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ(rules->size(), 2u);
  EXPECT_EQ(ParseTriggerRules({"a: status != ok", "b: step >"}).status().message(),
            "rule 'b: step >': column 10: expected a number: a factor (as in '3 x median') or a "
            "time (as in '250 ms'), found the end of the rule");
  EXPECT_EQ(ParseTriggerRules({"a: status != ok", "A: exit by signal"}).status().message(),
            "rule 'A: exit by signal': the name 'a' is another rule's already; each rule has a "
            "name of its own");
}

TEST(TriggerRuleTest, DurationsAsTheReasonsSayThem) {
  EXPECT_EQ(FormatTriggerDuration(212'000'000), "212 ms");
  EXPECT_EQ(FormatTriggerDuration(3'900'000'000), "3.9 s");
  EXPECT_EQ(FormatTriggerDuration(54'400'000), "54 ms");
  EXPECT_EQ(FormatTriggerDuration(5'400'000), "5.4 ms");
  EXPECT_EQ(FormatTriggerDuration(850'000), "850 us");
  EXPECT_EQ(FormatTriggerDuration(999), "999 ns");
}

// ---- The evaluator ----

// A window of one process: steps "ProfilerStep#first.." of the given lengths, back to back
// from `start`.
Trace Steps(uint64_t first, const std::vector<uint64_t>& lengths_ms, uint64_t start_ns,
            uint32_t pid = 7) {
  Trace t;
  ProcessTrace p;
  p.pid = pid;
  p.host = "h";
  p.executable = "/bin/train";
  uint64_t at = start_ns;
  for (size_t i = 0; i < lengths_ms.size(); ++i) {
    RangeEvent r;
    r.id = i + 1;
    r.name = p.names->Intern(absl::StrCat("ProfilerStep#", first + i));
    r.tid = 1;
    r.start_ns = at;
    r.duration_ns = lengths_ms[i] * 1'000'000;
    at += r.duration_ns;
    p.ranges.push_back(r);
    RangeEvent inner = r;  // a range inside the step: not a step
    inner.id += 100000;
    inner.name = "forward";
    inner.depth = 1;
    inner.parent_range = r.id;
    p.ranges.push_back(inner);
  }
  t.processes.push_back(std::move(p));
  return t;
}

TriggerEvaluator Evaluator(const std::vector<std::string>& texts) {
  absl::StatusOr<std::vector<TriggerRule>> rules = ParseTriggerRules(texts);
  EXPECT_TRUE(rules.ok()) << rules.status();
  return TriggerEvaluator(*std::move(rules));
}

TEST(TriggerEvaluatorTest, ASlowStepAgainstTheMedianOfTheLastN) {
  TriggerEvaluator e = Evaluator({"slow: step > 3 x median over 20"});
  // 50 steps of 10 ms in two windows, then one of 31 ms (3.1x), one of 29 ms (2.9x).
  std::vector<uint64_t> steps(25, 10);
  EXPECT_TRUE(e.Evaluate(Steps(0, steps, 1'000'000'000)).empty());
  steps.push_back(31);
  steps.push_back(29);
  std::vector<TriggerFiring> fired = e.Evaluate(Steps(25, steps, 2'000'000'000));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].rule, 0u);
  EXPECT_EQ(fired[0].pid, 7u);
  EXPECT_EQ(fired[0].value_ns, 31'000'000u);
  EXPECT_EQ(fired[0].median_ns, 10'000'000u);
  EXPECT_EQ(fired[0].threshold_ns, 30'000'000u);
  EXPECT_EQ(fired[0].start_ns, 2'000'000'000u + 25 * 10'000'000);
  EXPECT_EQ(fired[0].end_ns, fired[0].start_ns + 31'000'000);
  EXPECT_EQ(fired[0].reason,
            "pid 7 (train): step 50 took 3.1x the median of the last 20 (31 ms vs 10 ms)");
  EXPECT_EQ(e.counts()[0].triggers, 1u);
  EXPECT_EQ(e.counts()[0].suppressed, 0u);
}

TEST(TriggerEvaluatorTest, TheMedianIsOfTheLastNOnly) {
  TriggerEvaluator e = Evaluator({"slow: step > 3 x median over 10 every 1s"});
  // 10 steps of 100 ms, then 10 of 10 ms: the median is 10 ms now, and 40 ms is slow; had the
  // median been of all 20 it would be 55 ms.
  std::vector<uint64_t> steps(10, 100);
  steps.insert(steps.end(), 10, 10);
  steps.push_back(40);
  std::vector<TriggerFiring> fired = e.Evaluate(Steps(0, steps, 0));
  // The first 100-ms steps, judged as they came, fired nothing: no baseline of 10 yet.
  ASSERT_EQ(fired.size(), 1u) << fired[0].reason;
  EXPECT_EQ(fired[0].value_ns, 40'000'000u);
  EXPECT_EQ(fired[0].median_ns, 10'000'000u);
}

TEST(TriggerEvaluatorTest, NoJudgementBeforeABaseline) {
  TriggerEvaluator e = Evaluator({"slow: step > 3 x median"});
  // 19 steps, then one 10x: fewer than kMinHistory before it.
  std::vector<uint64_t> steps(19, 10);
  steps.push_back(100);
  EXPECT_TRUE(e.Evaluate(Steps(0, steps, 0)).empty());
  EXPECT_EQ(e.counts()[0].triggers, 0u);
}

TEST(TriggerEvaluatorTest, EachProcessHasItsOwnMedian) {
  TriggerEvaluator e = Evaluator({"slow: step > 3 x median every 1s"});
  // pid 2's steps take 40 ms; pid 1's 10 ms, then one 35 ms: slow for pid 1 (a median shared
  // with pid 2 would be 40 ms).
  Trace t = Steps(0, std::vector<uint64_t>(20, 40), 0, 2);
  std::vector<uint64_t> steps(20, 10);
  steps.push_back(35);
  Trace one = Steps(0, steps, 0, 1);
  t.processes.push_back(std::move(one.processes[0]));
  std::vector<TriggerFiring> fired = e.Evaluate(t);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].pid, 1u);
  EXPECT_EQ(fired[0].median_ns, 10'000'000u);
}

TEST(TriggerEvaluatorTest, AbsoluteStepAndExecutionThresholds) {
  TriggerEvaluator e =
      Evaluator({"slow: step > 250 ms every 1s", "long: execution > 20 ms every 1s"});
  Trace t = Steps(4711, {100, 251, 250}, 0);
  ProcessTrace& p = t.processes[0];
  for (uint64_t ms : {5, 21, 20}) {
    DeviceEvent d;
    d.id = p.device.size() + 1;
    d.name = "nc_exec_running";
    d.model_name = "mlp";
    d.start_ns = 10'000'000'000 + p.device.size() * 1'000'000'000;
    d.duration_ns = ms * 1'000'000;
    p.device.push_back(d);
    DeviceEvent op = d;  // work inside the execution: not an execution
    op.id += 1000;
    op.kind = DeviceEventKind::kEngineOp;
    op.name = "matmul";
    op.parent = d.id;
    p.device.push_back(op);
  }
  std::vector<TriggerFiring> fired = e.Evaluate(t);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].reason, "pid 7 (train): step 4712 took 251 ms, over 250 ms");
  EXPECT_EQ(fired[0].value_ns, 251'000'000u);
  EXPECT_EQ(fired[0].threshold_ns, 250'000'000u);
  EXPECT_EQ(fired[1].rule, 1u);
  EXPECT_EQ(fired[1].reason, "pid 7 (train): an execution of model mlp took 21 ms, over 20 ms");
}

TEST(TriggerEvaluatorTest, ALongExecutionAgainstItsModelsMedian) {
  TriggerEvaluator e = Evaluator({"long: execution > 5 x median"});
  Trace t;
  ProcessTrace p;
  p.pid = 9;
  p.executable = "serve";
  // 30 executions of "small" (1 ms) and of "big" (10 ms), then a "small" of 6 ms: slow for its
  // model, though shorter than any "big" one.
  for (int i = 0; i < 61; ++i) {
    DeviceEvent d;
    d.id = i + 1;
    d.name = "nc_exec_running";
    const bool small = i % 2 == 0;
    d.model_name = small ? Name("small") : Name("big");
    d.start_ns = i * 20'000'000;
    d.duration_ns = i == 60 ? 6'000'000 : small ? 1'000'000 : 10'000'000;
    p.device.push_back(d);
  }
  t.processes.push_back(std::move(p));
  std::vector<TriggerFiring> fired = e.Evaluate(t);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].reason,
            "pid 9 (serve): an execution of model small took 6.0x the median of the last 30 "
            "(6.0 ms vs 1.0 ms)");
}

TEST(TriggerEvaluatorTest, ErrorsCollectiveWaitsAndExits) {
  TriggerEvaluator e = Evaluator({"errors: status != ok every 1s", "crash: exit by signal",
                                  "cc: collective wait > 10 ms every 1s"});
  Trace t;
  ProcessTrace p;
  p.pid = 3;
  p.executable = "/x/cc_job";
  p.command_line = {"/x/cc_job", "--rank", "2", "--ranks", "4"};
  ApiCall ok;
  ok.name = "nrt_execute";
  ok.start_ns = 100;
  p.calls.push_back(ok);
  ApiCall failed = ok;
  failed.start_ns = 200;
  failed.status = 2;
  failed.model_name = "mlp";
  p.calls.push_back(failed);
  ApiCall pending = ok;
  pending.name = "nrta_cc_schedule";
  pending.start_ns = 300;
  pending.status = 1100;  // NRT_COLL_PENDING: not an error
  p.calls.push_back(pending);
  DeviceEvent wait;
  wait.kind = DeviceEventKind::kCollective;
  wait.name = kCcExecBarrier;
  wait.nrta_seq = (uint64_t{32} << 48) | 1;
  wait.start_ns = 1000;
  wait.duration_ns = 15'000'000;
  p.device.push_back(wait);
  // As the runtime writes them: the op on the collective's cc_running, not on its barrier.
  DeviceEvent running = wait;
  running.name = "cc_running";
  running.model_name = "all_reduce";
  running.start_ns = wait.start_ns + wait.duration_ns;
  running.duration_ns = 20'000;
  p.device.push_back(running);
  DeviceEvent short_wait = wait;
  short_wait.nrta_seq = (uint64_t{32} << 48) | 2;
  short_wait.start_ns = 2'000'000'000;
  short_wait.duration_ns = 9'000'000;
  p.device.push_back(short_wait);
  p.cut_off = true;  // not an exit: ProcessEnded says that (below)
  t.processes.push_back(p);
  std::vector<TriggerFiring> fired = e.Evaluate(t);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].reason, "pid 3 (cc_job), rank 2: a collective (all_reduce) waited 15 ms for "
                             "the other ranks, over 10 ms");
  // No Hello.job: the command line without its rank, the program by file name.
  EXPECT_EQ(fired[0].job, (ProcessJob{"cc_job --ranks 4", true}));
  EXPECT_EQ(fired[1].reason, "pid 3 (cc_job): nrt_execute returned status 2 (NRT_INVALID) on "
                             "model mlp");
  EXPECT_EQ(fired[1].start_ns, 200u);
  EXPECT_EQ(e.counts()[1].triggers, 0u);
  // The process ends: by a signal the daemon read, or in a way it could not tell.
  std::vector<TriggerFiring> ended =
      e.ProcessEnded(3, "h", "/x/cc_job", p.command_line, "", 5'000'000'000, 11);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].rule, 1u);
  EXPECT_EQ(ended[0].reason, "pid 3 (cc_job) was killed by signal 11 (SIGSEGV)");
  EXPECT_EQ(ended[0].start_ns, 5'000'000'000u);
  EXPECT_EQ(ended[0].job, (ProcessJob{"cc_job --ranks 4", true}));
  TriggerEvaluator unknown = Evaluator({"crash: exit by signal every 0s"});
  ended = unknown.ProcessEnded(4, "h", "/x/train", {}, "10.0.0.7:62182", 1, 0);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].reason, "pid 4 (train) ended without its final batch: killed by a signal (or "
                             "it called _exit)");
  EXPECT_EQ(ended[0].job, (ProcessJob{"10.0.0.7:62182", false}));
}

// A process's job: its Hello.job (NRTPROF_JOB, NEURON_RT_ROOT_COMM_ID) whatever its command
// line says; without one, its command line if it names a rank; else none (captured alone).
TEST(TriggerEvaluatorTest, TheJobIsTheHellosElseTheCommandLinesRank) {
  TriggerEvaluator e = Evaluator({"errors: status != ok every 0s"});
  Trace t;
  for (const auto& [job, argv] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"llama-70b", {"/x/train", "--rank", "1"}},
           {"", {"/x/train", "--rank", "1"}},
           {"", {"/x/train", "--steps", "10"}}}) {
    ProcessTrace p;
    p.pid = static_cast<uint32_t>(t.processes.size() + 1);
    p.executable = "/x/train";
    p.command_line = argv;
    p.job = job;
    ApiCall failed;
    failed.name = "nrt_execute";
    failed.status = 1;
    p.calls.push_back(failed);
    t.processes.push_back(p);
  }
  std::vector<TriggerFiring> fired = e.Evaluate(t);
  ASSERT_EQ(fired.size(), 3u);
  EXPECT_EQ(fired[0].job, (ProcessJob{"llama-70b", false}));
  EXPECT_EQ(fired[1].job, (ProcessJob{"train", true}));
  EXPECT_TRUE(fired[2].job.empty());
  EXPECT_FALSE(fired[0].job == fired[1].job);
}

// The reason names a status as the runtime's nrt_get_status_as_str does, the hardware errors
// the public header does not list included; a value the runtime gives no name, by number only.
TEST(TriggerEvaluatorTest, AStatusReadsAsTheRuntimeNamesIt) {
  TriggerEvaluator e = Evaluator({"errors: status != ok every 0s"});
  Trace t;
  ProcessTrace p;
  p.pid = 5;
  p.executable = "/x/train";
  for (int32_t status : {1201, 8}) {
    ApiCall call;
    call.name = "nrt_execute";
    call.start_ns = 100 * p.calls.size();
    call.status = status;
    p.calls.push_back(call);
  }
  t.processes.push_back(p);
  std::vector<TriggerFiring> fired = e.Evaluate(t);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].reason,
            "pid 5 (train): nrt_execute returned status 1201 (NRT_EXEC_HW_ERR_HBM_UE)");
  EXPECT_EQ(fired[1].reason, "pid 5 (train): nrt_execute returned status 8");
}

TEST(TriggerEvaluatorTest, OneCapturePerRulePerIntervalTheRestSuppressed) {
  TriggerEvaluator e = Evaluator({"slow: step > 3 x median every 10s", "abs: step > 35 ms every 1s"});
  // A baseline, then a burst of 5 slow steps (40 ms) in 200 ms.
  std::vector<uint64_t> steps(20, 10);
  steps.insert(steps.end(), 5, 40);
  std::vector<TriggerFiring> fired = e.Evaluate(Steps(0, steps, 0));
  ASSERT_EQ(fired.size(), 2u);  // one per rule
  EXPECT_EQ(fired[0].rule, 0u);
  EXPECT_EQ(fired[1].rule, 1u);
  EXPECT_EQ(e.counts()[0].triggers, 5u);
  EXPECT_EQ(e.counts()[0].suppressed, 4u);
  EXPECT_EQ(e.counts()[1].suppressed, 4u);
  // 5 s later (within the 10 s of the first rule, past the 1 s of the second): a slow step.
  std::vector<TriggerFiring> later = e.Evaluate(Steps(25, {10, 45}, 5'000'000'000));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].rule, 1u);
  EXPECT_EQ(e.counts()[0].suppressed, 5u);
  // 11 s after the first: the first rule fires again.
  ASSERT_EQ(e.Evaluate(Steps(27, {10, 45}, 11'000'000'000)).size(), 2u);
  EXPECT_EQ(e.counts()[0].triggers, 7u);
  EXPECT_EQ(e.counts()[0].suppressed, 5u);
}

}  // namespace
}  // namespace nrtprof::daemon
