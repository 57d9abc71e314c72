#include "daemon/triggers.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/nrt_status_names.h"
#include "proto/nrtprof.pb.h"
#include "trace/collectives.h"

namespace nrtprof::daemon {
namespace {

// ---- The rule language: tokens, then a recursive descent over them ----

struct Token {
  enum Kind { kWord, kNumber, kSymbol, kEnd } kind = kEnd;
  std::string text;
  size_t column = 0;  // from 1
};

// Words are letters, digits, '_' and '-' starting with a letter (rule names, keywords, units,
// file kinds); numbers are digits with at most one '.'; symbols ':', ',', '>', '!=' (and '<',
// '=', which no rule takes, so that the parser says what it expected instead). A number
// followed at once by letters ("250ms", "3x") is two tokens.
absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view text) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const size_t column = i + 1;
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (absl::ascii_isalpha(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < text.size() && (absl::ascii_isalnum(static_cast<unsigned char>(text[j])) ||
                                 text[j] == '_' || text[j] == '-')) {
        ++j;
      }
      tokens.push_back({Token::kWord, std::string(text.substr(i, j - i)), column});
      i = j;
    } else if (absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < text.size() &&
                absl::ascii_isdigit(static_cast<unsigned char>(text[i + 1])))) {
      size_t j = i;
      bool dot = false;
      while (j < text.size() && (absl::ascii_isdigit(static_cast<unsigned char>(text[j])) ||
                                 (text[j] == '.' && !dot))) {
        dot = dot || text[j] == '.';
        ++j;
      }
      tokens.push_back({Token::kNumber, std::string(text.substr(i, j - i)), column});
      i = j;
    } else if (c == ':' || c == ',' || c == '>' || c == '<' || c == '=') {
      tokens.push_back({Token::kSymbol, std::string(1, c), column});
      ++i;
    } else if (c == '!' && i + 1 < text.size() && text[i + 1] == '=') {
      tokens.push_back({Token::kSymbol, "!=", column});
      i += 2;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "column %d: unexpected character '%c' (a rule is NAME: CONDITION [SETTING]..., see "
          "docs/triggers.md)",
          column, c));
    }
  }
  tokens.push_back({Token::kEnd, "", text.size() + 1});
  return tokens;
}

class RuleParser {
 public:
  RuleParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::Status Parse(TriggerRule* rule) {
    // NAME ':'
    const Token& name = Peek();
    if (name.kind != Token::kWord) return Expected("the rule's name (as in 'slow-step: ...')");
    if (name.text.size() > TriggerRule::kMaxNameLength) {
      return Error(name, absl::StrCat("a name of at most ", TriggerRule::kMaxNameLength,
                                      " characters"));
    }
    rule->name = absl::AsciiStrToLower(name.text);
    Next();
    if (!Symbol(":")) return Expected("':' after the rule's name");
    if (absl::Status s = Condition(rule); !s.ok()) return s;
    return Settings(rule);
  }

 private:
  const Token& Peek() const { return tokens_[at_]; }
  void Next() {
    if (tokens_[at_].kind != Token::kEnd) ++at_;
  }
  bool Word(absl::string_view w) {
    if (Peek().kind == Token::kWord && absl::AsciiStrToLower(Peek().text) == w) {
      Next();
      return true;
    }
    return false;
  }
  bool Symbol(absl::string_view s) {
    if (Peek().kind == Token::kSymbol && Peek().text == s) {
      Next();
      return true;
    }
    return false;
  }
  static std::string Found(const Token& t) {
    return t.kind == Token::kEnd ? "the end of the rule" : absl::StrCat("'", t.text, "'");
  }
  static absl::Status Error(const Token& t, absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("column ", t.column, ": expected ", what, ", found ", Found(t)));
  }
  absl::Status Expected(absl::string_view what) const { return Error(Peek(), what); }

  absl::Status Condition(TriggerRule* rule) {
    const Token& subject = Peek();
    const std::string word =
        subject.kind == Token::kWord ? absl::AsciiStrToLower(subject.text) : "";
    if (word == "step" || word == "execution") {
      Next();
      rule->subject = word == "step" ? TriggerRule::Subject::kStep
                                     : TriggerRule::Subject::kExecution;
      if (!Symbol(">")) return Expected(absl::StrCat("'>' after '", word, "'"));
      return Amount(rule);
    }
    if (word == "status") {
      Next();
      rule->subject = TriggerRule::Subject::kStatus;
      if (!Symbol("!=")) return Expected("'!=' after 'status' (as in 'status != ok')");
      if (!Word("ok")) return Expected("'ok' (as in 'status != ok')");
      return absl::OkStatus();
    }
    if (word == "exit") {
      Next();
      rule->subject = TriggerRule::Subject::kExitBySignal;
      if (!Word("by")) return Expected("'by' (as in 'exit by signal')");
      if (!Word("signal")) return Expected("'signal' (as in 'exit by signal')");
      return absl::OkStatus();
    }
    if (word == "collective") {
      Next();
      rule->subject = TriggerRule::Subject::kCollectiveWait;
      if (!Word("wait")) return Expected("'wait' (as in 'collective wait > 10 ms')");
      if (!Symbol(">")) return Expected("'>' after 'collective wait'");
      const Token& at = Peek();
      if (absl::Status s = Duration(&rule->threshold_ns, "a time (as in '10 ms')"); !s.ok()) {
        return s;
      }
      return Positive(at, rule->threshold_ns);
    }
    return Expected(
        "a condition: 'step >', 'execution >', 'status != ok', 'exit by signal' or "
        "'collective wait >'");
  }

  // K x median [over N] | DURATION
  absl::Status Amount(TriggerRule* rule) {
    const Token number = Peek();
    double value = 0;
    if (number.kind != Token::kNumber || !absl::SimpleAtod(number.text, &value)) {
      return Expected("a number: a factor (as in '3 x median') or a time (as in '250 ms')");
    }
    Next();
    if (Word("x")) {
      if (!Word("median")) return Expected("'median' (as in '3 x median')");
      if (!(value > 1)) return Error(number, "a factor above 1");
      rule->factor = value;
      if (Word("over")) {
        const Token n = Peek();
        uint32_t over = 0;
        if (n.kind != Token::kNumber || !absl::SimpleAtoi(n.text, &over) || over < 1 ||
            over > TriggerRule::kMaxOver) {
          return Error(n, absl::StrCat("a count of 1 to ", TriggerRule::kMaxOver,
                                       " (as in 'over 50')"));
        }
        Next();
        rule->over = over;
      }
      return absl::OkStatus();
    }
    uint64_t ns = 0;
    if (!Unit(value, &ns)) {
      return Expected(absl::StrCat("'x median' or a unit (ns, us, ms, s, m, h) after ",
                                   number.text));
    }
    rule->threshold_ns = ns;
    return Positive(number, ns);
  }

  static absl::Status Positive(const Token& at, uint64_t ns) {
    if (ns == 0) return Error(at, "a time above 0");
    return absl::OkStatus();
  }

  // A unit word after a number already read: the time in ns.
  bool Unit(double value, uint64_t* ns) {
    if (Peek().kind != Token::kWord) return false;
    static const std::pair<const char*, double> kUnits[] = {
        {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"min", 60e9}, {"h", 3600e9}};
    const std::string unit = absl::AsciiStrToLower(Peek().text);
    for (const auto& [name, scale] : kUnits) {
      if (unit == name) {
        const double t = value * scale;
        if (t > 1e18) return false;
        *ns = static_cast<uint64_t>(t + 0.5);
        Next();
        return true;
      }
    }
    return false;
  }

  absl::Status Duration(uint64_t* ns, absl::string_view what) {
    const Token number = Peek();
    double value = 0;
    if (number.kind != Token::kNumber || !absl::SimpleAtod(number.text, &value)) {
      return Expected(what);
    }
    Next();
    if (!Unit(value, ns)) {
      return Expected(absl::StrCat("a unit (ns, us, ms, s, m, h) after ", number.text));
    }
    return absl::OkStatus();
  }

  absl::Status Settings(TriggerRule* rule) {
    std::set<std::string> seen;
    while (Peek().kind != Token::kEnd) {
      const Token setting = Peek();
      const std::string word =
          setting.kind == Token::kWord ? absl::AsciiStrToLower(setting.text) : "";
      if (word != "before" && word != "after" && word != "every" && word != "files" &&
          word != "on") {
        return Expected(
            "a setting ('before', 'after', 'every', 'files', 'on') or the end of the rule");
      }
      if (!seen.insert(word).second) {
        return Error(setting, absl::StrCat("each setting once ('", word, "' came before)"));
      }
      Next();
      const Token value = Peek();
      if (word == "before" || word == "after" || word == "every") {
        uint64_t ns = 0;
        if (absl::Status s = Duration(&ns, absl::StrCat("a time after '", word,
                                                       "' (as in '", word, " 10s')"));
            !s.ok()) {
          return s;
        }
        if (word == "before") {
          if (ns > TriggerRule::kMaxBeforeNs) return Error(value, "a look-back of at most 1 h");
          rule->before_ns = ns;
        } else if (word == "after") {
          if (ns > TriggerRule::kMaxAfterNs) return Error(value, "a look-ahead of at most 60 s");
          rule->after_ns = ns;
        } else {
          rule->every_ns = ns;  // 0: every anomaly (the budget still bounds the disk)
        }
      } else if (word == "files") {
        rule->files = 0;
        do {
          const Token kind = Peek();
          const std::string k =
              kind.kind == Token::kWord ? absl::AsciiStrToLower(kind.text) : "";
          if (k == "pftrace") {
            rule->files |= 1u << nrtprof::CAPTURE_FILE_KIND_PFTRACE;
          } else if (k == "json") {
            rule->files |= 1u << nrtprof::CAPTURE_FILE_KIND_JSON;
          } else if (k == "summary") {
            rule->files |= 1u << nrtprof::CAPTURE_FILE_KIND_SUMMARY;
          } else if (k == "artifacts") {
            rule->files |= 1u << nrtprof::CAPTURE_FILE_KIND_ARTIFACTS;
          } else {
            return Expected("a kind of file: pftrace, json, summary or artifacts");
          }
          Next();
        } while (Symbol(","));
      } else {  // on
        if (Word("process")) {
          rule->scope = TriggerRule::Scope::kProcess;
        } else if (Word("job")) {
          rule->scope = TriggerRule::Scope::kJob;
        } else {
          return Expected("'process' or 'job' after 'on'");
        }
      }
    }
    return absl::OkStatus();
  }

  std::vector<Token> tokens_;
  size_t at_ = 0;
};

// NRT_COLL_PENDING: a collective's request not done yet, the runtime's way of saying "later".
constexpr int32_t kCollPending = 1100;

const std::string kUnknownModel = "unknown";

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "pid 123 (train)": the process, in the reasons.
std::string Who(const ProcessTrace& p) {
  return absl::StrCat("pid ", p.pid, " (", Basename(p.executable), ")");
}

// "SIGSEGV" for 11: sigabbrev_np's names, which glibc 2.32 has (Debian 12's 2.36).
std::string SignalName(int signal) {
  const char* name = sigabbrev_np(signal);
  return name != nullptr ? absl::StrCat("SIG", name) : "an unknown signal";
}

// "ProfilerStep#4711" -> "4711"; empty for another range.
absl::string_view StepNumber(absl::string_view name) {
  constexpr absl::string_view kStep = "ProfilerStep#";
  if (name.size() <= kStep.size() || name.substr(0, kStep.size()) != kStep) return {};
  return name.substr(kStep.size());
}

}  // namespace

absl::StatusOr<TriggerRule> ParseTriggerRule(absl::string_view text) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(text);
  if (!tokens.ok()) return tokens.status();
  TriggerRule rule;
  rule.text = std::string(absl::StripAsciiWhitespace(text));
  RuleParser parser(*std::move(tokens));
  if (absl::Status s = parser.Parse(&rule); !s.ok()) return s;
  return rule;
}

absl::StatusOr<std::vector<TriggerRule>> ParseTriggerRules(const std::vector<std::string>& texts) {
  std::vector<TriggerRule> rules;
  std::set<std::string> names;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<TriggerRule> rule = ParseTriggerRule(texts[i]);
    if (!rule.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("rule '", texts[i], "': ",
                                                     rule.status().message()));
    }
    if (!names.insert(rule->name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("rule '", texts[i], "': the name '", rule->name,
                       "' is another rule's already; each rule has a name of its own"));
    }
    rules.push_back(*std::move(rule));
  }
  return rules;
}

std::string FormatTriggerDuration(uint64_t ns) {
  if (ns >= 10'000'000'000) return absl::StrFormat("%.0f s", ns / 1e9);
  if (ns >= 1'000'000'000) return absl::StrFormat("%.1f s", ns / 1e9);
  if (ns >= 10'000'000) return absl::StrFormat("%.0f ms", ns / 1e6);
  if (ns >= 1'000'000) return absl::StrFormat("%.1f ms", ns / 1e6);
  if (ns >= 10'000) return absl::StrFormat("%.0f us", ns / 1e3);
  if (ns >= 1'000) return absl::StrFormat("%.1f us", ns / 1e3);
  return absl::StrCat(ns, " ns");
}

// ---- The evaluator ----

uint64_t TriggerEvaluator::RollingMedian::Median() const {
  return sorted_.empty() ? 0 : sorted_[sorted_.size() / 2];
}

void TriggerEvaluator::RollingMedian::Add(uint64_t value) {
  if (ring_.size() < capacity_) {
    ring_.push_back(value);
  } else {
    const uint64_t old = ring_[next_];
    ring_[next_] = value;
    next_ = (next_ + 1) % capacity_;
    sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), old));
  }
  sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), value), value);
}

TriggerEvaluator::TriggerEvaluator(std::vector<TriggerRule> rules)
    : rules_(std::move(rules)),
      counts_(rules_.size()),
      last_fired_ns_(rules_.size(), 0),
      fired_(rules_.size(), false) {
  for (const TriggerRule& r : rules_) {
    switch (r.subject) {
      case TriggerRule::Subject::kStep: any_step_rule_ = true; break;
      case TriggerRule::Subject::kExecution: any_execution_rule_ = true; break;
      case TriggerRule::Subject::kStatus: any_status_rule_ = true; break;
      case TriggerRule::Subject::kExitBySignal: break;  // ProcessEnded
      case TriggerRule::Subject::kCollectiveWait: any_collective_rule_ = true; break;
    }
  }
}

bool TriggerEvaluator::Admit(size_t rule, uint64_t at_ns) {
  ++counts_[rule].triggers;
  if (fired_[rule] && rules_[rule].every_ns != 0 &&
      at_ns < last_fired_ns_[rule] + rules_[rule].every_ns &&
      at_ns + rules_[rule].every_ns > last_fired_ns_[rule]) {
    ++counts_[rule].suppressed;
    return false;
  }
  fired_[rule] = true;
  last_fired_ns_[rule] = at_ns;
  return true;
}

std::vector<TriggerEvaluator::Counts> TriggerEvaluator::counts() const { return counts_; }

TriggerFiring TriggerEvaluator::Firing(size_t rule, const ProcessTrace& p, uint64_t start_ns,
                                       uint64_t end_ns) const {
  TriggerFiring f;
  f.rule = rule;
  f.pid = p.pid;
  f.host = p.host;
  f.executable = Basename(p.executable);
  f.job = JobOf(p);
  f.start_ns = start_ns;
  f.end_ns = end_ns;
  return f;
}

// A step or an execution of `duration_ns`: judged by the rule, then added to its history (null
// for an absolute rule). `what` names it, made only for a firing.
void TriggerEvaluator::Measure(size_t rule, const ProcessTrace& p, RollingMedian* history,
                               uint64_t start_ns, uint64_t duration_ns,
                               const std::function<std::string()>& what,
                               std::vector<TriggerFiring>* out) {
  const TriggerRule& r = rules_[rule];
  if (history == nullptr) {
    if (duration_ns > r.threshold_ns && Admit(rule, start_ns)) {
      TriggerFiring f = Firing(rule, p, start_ns, start_ns + duration_ns);
      f.value_ns = duration_ns;
      f.threshold_ns = r.threshold_ns;
      f.reason = absl::StrCat(Who(p), ": ", what(), " took ", FormatTriggerDuration(duration_ns),
                              ", over ", FormatTriggerDuration(r.threshold_ns));
      out->push_back(std::move(f));
    }
    return;
  }
  RollingMedian& h = *history;
  if (h.size() >= std::min(r.over, kMinHistory)) {
    const uint64_t median = h.Median();
    const double limit = r.factor * static_cast<double>(median);
    if (static_cast<double>(duration_ns) > limit && Admit(rule, start_ns)) {
      TriggerFiring f = Firing(rule, p, start_ns, start_ns + duration_ns);
      f.value_ns = duration_ns;
      f.threshold_ns = static_cast<uint64_t>(limit);
      f.median_ns = median;
      const double times = median == 0 ? 0 : static_cast<double>(duration_ns) / median;
      f.reason = absl::StrFormat("%s: %s took %.1fx the median of the last %d (%s vs %s)", Who(p),
                                 what(), times, h.size(), FormatTriggerDuration(duration_ns),
                                 FormatTriggerDuration(median));
      out->push_back(std::move(f));
    }
  }
  h.Add(duration_ns);
}

TriggerEvaluator::RollingMedian* TriggerEvaluator::History(size_t rule, const ProcessTrace& p,
                                                           const std::string& model) {
  const TriggerRule& r = rules_[rule];
  if (!r.relative()) return nullptr;
  HistoryKey key(rule, p.pid, p.host, model);
  auto it = history_.find(key);
  if (it == history_.end()) it = history_.emplace(std::move(key), RollingMedian(r.over)).first;
  return &it->second;
}

std::vector<TriggerFiring> TriggerEvaluator::Evaluate(const Trace& window) {
  std::vector<TriggerFiring> out;
  if (rules_.empty()) return out;
  // Processes come and go: past the bound, every median starts over (each needs kMinHistory
  // values again) rather than the daemon's memory growing with every process it ever saw.
  if (history_.size() > kMaxHistories) history_.clear();
  // A process's steps in the order they ran (ranges are by thread, then start).
  std::vector<const RangeEvent*> steps;
  for (const ProcessTrace& p : window.processes) {
    if (any_step_rule_) {
      steps.clear();
      for (const RangeEvent& range : p.ranges) {
        if (!StepNumber(range.name.str()).empty()) steps.push_back(&range);
      }
      std::sort(steps.begin(), steps.end(), [](const RangeEvent* a, const RangeEvent* b) {
        return a->start_ns < b->start_ns;
      });
      for (size_t rule = 0; rule < rules_.size() && !steps.empty(); ++rule) {
        if (rules_[rule].subject != TriggerRule::Subject::kStep) continue;
        RollingMedian* history = History(rule, p, "");
        for (const RangeEvent* step : steps) {
          Measure(rule, p, history, step->start_ns, step->duration_ns,
                  [step] { return absl::StrCat("step ", StepNumber(step->name.str())); }, &out);
        }
      }
    }
    if (any_execution_rule_ || any_collective_rule_) {
      std::vector<std::pair<const std::string*, std::vector<RollingMedian*>>> models;
      // A collective's op ("all_reduce") is on its cc_running event, not on its barrier's.
      std::unordered_map<uint64_t, Name> cc_op_of_request;  // by nrta_seq
      if (any_collective_rule_) {
        for (const DeviceEvent& e : p.device) {
          if (e.kind == DeviceEventKind::kCollective && e.nrta_seq != 0 &&
              !e.model_name.empty()) {
            cc_op_of_request.emplace(e.nrta_seq, e.model_name);
          }
        }
      }
      for (const DeviceEvent& e : p.device) {
        if (e.kind == DeviceEventKind::kCollective) {
          if (!any_collective_rule_ || e.parent != 0 || e.name != kCcExecBarrier) continue;
          for (size_t rule = 0; rule < rules_.size(); ++rule) {
            const TriggerRule& r = rules_[rule];
            if (r.subject != TriggerRule::Subject::kCollectiveWait) continue;
            if (e.duration_ns > r.threshold_ns && Admit(rule, e.start_ns)) {
              TriggerFiring f = Firing(rule, p, e.start_ns, e.start_ns + e.duration_ns);
              f.value_ns = e.duration_ns;
              f.threshold_ns = r.threshold_ns;
              const int rank = RankOf(p);
              Name op = e.model_name;
              if (auto it = cc_op_of_request.find(e.nrta_seq);
                  op.empty() && it != cc_op_of_request.end()) {
                op = it->second;
              }
              f.reason = absl::StrCat(
                  "pid ", p.pid, " (", Basename(p.executable), ")",
                  rank >= 0 ? absl::StrCat(", rank ", rank) : "", ": a collective",
                  op.empty() ? "" : absl::StrCat(" (", op.str(), ")"), " waited ",
                  FormatTriggerDuration(e.duration_ns), " for the other ranks, over ",
                  FormatTriggerDuration(r.threshold_ns));
              out.push_back(std::move(f));
            }
          }
          continue;
        }
        if (!any_execution_rule_ || e.kind != DeviceEventKind::kExecution || e.parent != 0) {
          continue;
        }
        // The model's histories, found once per process and model: its executions' names are
        // one table's, so one text is one address (trace_name.h), and a process runs few.
        const std::string& model = e.model_name.empty() ? kUnknownModel : e.model_name.str();
        size_t m = 0;
        while (m < models.size() && models[m].first != &model) ++m;
        if (m == models.size()) {
          models.emplace_back(&model, std::vector<RollingMedian*>(rules_.size(), nullptr));
          for (size_t rule = 0; rule < rules_.size(); ++rule) {
            if (rules_[rule].subject == TriggerRule::Subject::kExecution) {
              models[m].second[rule] = History(rule, p, model);
            }
          }
        }
        for (size_t rule = 0; rule < rules_.size(); ++rule) {
          if (rules_[rule].subject != TriggerRule::Subject::kExecution) continue;
          Measure(rule, p, models[m].second[rule], e.start_ns, e.duration_ns,
                  [&model] { return absl::StrCat("an execution of model ", model); }, &out);
        }
      }
    }
    if (any_status_rule_) {
      for (const ApiCall& call : p.calls) {
        if (call.status == 0 || call.status == kCollPending) continue;
        for (size_t rule = 0; rule < rules_.size(); ++rule) {
          if (rules_[rule].subject != TriggerRule::Subject::kStatus) continue;
          if (!Admit(rule, call.start_ns)) continue;
          TriggerFiring f = Firing(rule, p, call.start_ns, call.start_ns + call.duration_ns);
          const char* name = NrtStatusName(call.status);
          f.reason = absl::StrCat("pid ", p.pid, " (", Basename(p.executable), "): ",
                                  call.name.str(), " returned status ", call.status,
                                  name != nullptr ? absl::StrCat(" (", name, ")") : "",
                                  call.model_name.empty()
                                      ? ""
                                      : absl::StrCat(" on model ", call.model_name.str()));
          out.push_back(std::move(f));
        }
      }
    }
  }
  return out;
}

std::vector<TriggerFiring> TriggerEvaluator::ProcessEnded(
    uint32_t pid, const std::string& host, const std::string& executable,
    const std::vector<std::string>& command_line, const std::string& job, uint64_t at_ns,
    int signal) {
  std::vector<TriggerFiring> out;
  ProcessTrace p;  // what Firing reads of it
  p.pid = pid;
  p.host = host;
  p.executable = executable;
  p.command_line = command_line;
  p.job = job;
  for (size_t rule = 0; rule < rules_.size(); ++rule) {
    if (rules_[rule].subject != TriggerRule::Subject::kExitBySignal) continue;
    if (!Admit(rule, at_ns)) continue;
    TriggerFiring f = Firing(rule, p, at_ns, at_ns);
    f.reason = signal > 0
                   ? absl::StrCat(Who(p), " was killed by signal ", signal, " (",
                                  SignalName(signal), ")")
                   : absl::StrCat(Who(p),
                                  " ended without its final batch: killed by a signal (or it "
                                  "called _exit)");
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace nrtprof::daemon
