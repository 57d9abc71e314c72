#include "daemon/trigger_captures.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/json_text.h"
#include "google/protobuf/util/json_util.h"
#include "trace/collectives.h"

namespace nrtprof::daemon {
namespace {

namespace fs = std::filesystem;

// What a folder's files take, its subfolders' included.
uint64_t FolderBytes(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const uintmax_t n = it->file_size(size_ec);
      if (!size_ec) bytes += n;
    }
  }
  return bytes;
}

std::vector<nrtprof::CaptureFileKind> FileKinds(uint32_t bits) {
  std::vector<nrtprof::CaptureFileKind> kinds;
  for (int k = nrtprof::CaptureFileKind_MIN; k <= nrtprof::CaptureFileKind_MAX; ++k) {
    if (k != nrtprof::CAPTURE_FILE_KIND_UNSPECIFIED && (bits & (1u << k)) != 0) {
      kinds.push_back(static_cast<nrtprof::CaptureFileKind>(k));
    }
  }
  return kinds;
}

// trigger.json's fields of the rule and its anomaly (the JSON object's text up to them).
std::string MarkerStart(const std::string& id, const nrtprof::CaptureTrigger& t) {
  return absl::StrCat("{\"capture_id\": ", JsonString(id), ", \"rule\": ", JsonString(t.rule()),
                      ", \"condition\": ", JsonString(t.condition()),
                      ", \"reason\": ", JsonString(t.reason()), ", \"value_ns\": ", t.value_ns(),
                      ", \"threshold_ns\": ", t.threshold_ns(), ", \"unix_ms\": ", t.unix_ms());
}

}  // namespace

TriggerCaptures::TriggerCaptures(TriggerCaptureOptions options, CollectorClock* clock)
    : options_(std::move(options)),
      clock_(clock),
      evaluator_(options_.rules),
      // A peer down stays down for a while: a line for each of its first few, then one a minute
      // that counts the rest (and /metrics counts every one).
      peer_log_("peer failure", {5, 60'000'000'000},
                [clock] { return clock->MonotonicNs(); }) {
  counts_.resize(options_.rules.size());
  rule_counts_.resize(options_.rules.size());
  for (const std::string& peer : options_.peers) {
    peer_stubs_.push_back(
        nrtprof::Control::NewStub(grpc::CreateChannel(peer, options_.peer_credentials)));
  }
  in_flight_.resize(options_.peers.size());
}

TriggerCaptures::~TriggerCaptures() { Stop(); }

void TriggerCaptures::OnFold(const Trace& window) {
  std::vector<Pending> pending;
  std::vector<TriggerEvaluator::Counts> counts;
  {
    std::lock_guard<std::mutex> eval_lock(eval_mu_);
    for (TriggerFiring& f : evaluator_.Evaluate(window)) pending.push_back(PendingOf(std::move(f)));
    counts = evaluator_.counts();
  }
  Queue(std::move(pending), std::move(counts));
}

TriggerCaptures::Pending TriggerCaptures::PendingOf(TriggerFiring f) const {
  const TriggerRule& rule = options_.rules[f.rule];
  Pending p;
  // Its job's processes, those still streaming and those the flight recorder holds of the
  // window (the capture's StartCaptureRequest.job): a process of no job, alone.
  p.whole_job = rule.scope == TriggerRule::Scope::kJob && !f.job.empty();
  Log(absl::StrFormat(
      "trigger '%s': %s; capturing %s before it and %s after, of %s", rule.name, f.reason,
      FormatTriggerDuration(rule.before_ns), FormatTriggerDuration(rule.after_ns),
      !p.whole_job ? absl::StrCat("pid ", f.pid)
      : f.job.from_command_line
          ? absl::StrCat("its job's processes (its command line but for the rank: '", f.job.name,
                         "')")
          : absl::StrCat("its job's processes (job '", f.job.name, "')")));
  p.firing = std::move(f);
  return p;
}

void TriggerCaptures::Queue(std::vector<Pending> pending,
                            std::vector<TriggerEvaluator::Counts> counts) {
  std::lock_guard<std::mutex> lock(mu_);
  counts_ = std::move(counts);
  for (Pending& p : pending) {
    if (queue_.size() >= kMaxQueued) {
      ++rule_counts_[p.firing.rule].failed;
      Log(absl::StrCat("trigger '", options_.rules[p.firing.rule].name, "': ", kMaxQueued,
                       " captures are waiting already; no capture of ", p.firing.reason));
      continue;
    }
    queue_.push_back(std::move(p));
  }
  if (!pending.empty()) wake_.notify_all();
}

void TriggerCaptures::OnEndedWithoutFinal(const nrtprof::Hello& hello, bool local) {
  bool any = false;
  for (const TriggerRule& r : options_.rules) {
    any = any || r.subject == TriggerRule::Subject::kExitBySignal;
  }
  if (!any) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_.size() >= kMaxQueued) return;
  ended_.push_back({hello, local, clock_->MonotonicNs()});
  wake_.notify_all();
}

void TriggerCaptures::JudgeEnded(const Ended& ended) {
  const uint32_t pid = ended.hello.pid();
  int signal = 0;
  if (ended.local) {
    // Its stream closes as the process exits: within a second it is a zombie (whose stat's
    // 52nd field is its wait status), or reaped and gone (then how it ended is unknown). Still
    // running after that: only its stream failed.
    for (int attempt = 0;; ++attempt) {
      std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t paren = stat.rfind(')');
      if (!in.good() && stat.empty()) break;  // gone
      std::vector<std::string> fields;
      if (paren != std::string::npos) {
        std::istringstream rest(stat.substr(paren + 2));
        for (std::string f; rest >> f;) fields.push_back(f);
      }
      // fields[0] is field 3 (state); field 52 (exit_code) is fields[49].
      if (!fields.empty() && (fields[0] == "Z" || fields[0] == "X")) {
        int status = 0;
        if (fields.size() > 49 && absl::SimpleAtoi(fields[49], &status)) {
          if (WIFEXITED(status)) return;  // it exited (_exit): not a signal
          if (WIFSIGNALED(status)) signal = WTERMSIG(status);
        }
        break;
      }
      if (attempt == 50) return;  // alive a second later: the stream failed, not the process
      usleep(20'000);
    }
  }
  std::vector<Pending> pending;
  std::vector<TriggerEvaluator::Counts> counts;
  {
    std::lock_guard<std::mutex> eval_lock(eval_mu_);
    const std::vector<std::string> command(ended.hello.command_line().begin(),
                                           ended.hello.command_line().end());
    for (TriggerFiring& f :
         evaluator_.ProcessEnded(pid, ended.hello.host(), ended.hello.executable(), command,
                                 ended.hello.job(), ended.at_ns, signal)) {
      pending.push_back(PendingOf(std::move(f)));
    }
    counts = evaluator_.counts();
  }
  Queue(std::move(pending), std::move(counts));
}

void TriggerCaptures::Start(CollectorCore* core, Metrics* metrics) {
  core_ = core;
  metrics_ = metrics;
  FindKept();
  {
    std::lock_guard<std::mutex> lock(mu_);
    KeepBudget();
  }
  if (options_.rules.empty()) return;  // it keeps only the captures its peers ask for
  folding_ = std::thread([this] { FoldLoop(); });
  capturing_ = std::thread([this] { CaptureLoop(); });
}

void TriggerCaptures::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (const Pending& p : queue_) {
      Log(absl::StrCat("trigger '", options_.rules[p.firing.rule].name,
                       "': the daemon stops; no capture of ", p.firing.reason));
    }
    queue_.clear();
  }
  wake_.notify_all();
  if (folding_.joinable()) folding_.join();
  if (capturing_.joinable()) capturing_.join();
  // The peers' asks still in flight: cancelled (each counted as failed), then joined.
  std::list<Ask> asks;
  {
    std::lock_guard<std::mutex> lock(asks_mu_);
    asks_stopping_ = true;
    for (Ask& a : asks_) {
      if (a.context != nullptr) a.context->TryCancel();
    }
    asks.swap(asks_);
  }
  for (Ask& a : asks) a.thread.join();
}

void TriggerCaptures::FoldLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, options_.check_period, [this] { return stopping_; })) {
    lock.unlock();
    core_->FoldMetrics(metrics_);
    lock.lock();
  }
}

void TriggerCaptures::CaptureLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty() || !ended_.empty(); });
    if (stopping_) return;
    if (!ended_.empty()) {
      const Ended ended = std::move(ended_.front());
      ended_.pop_front();
      lock.unlock();
      JudgeEnded(ended);
      lock.lock();
      continue;
    }
    Pending next = std::move(queue_.front());
    queue_.pop_front();
    // Until the look-ahead has passed: the capture is taken whole at once, from the recorder.
    const uint64_t deadline = next.firing.end_ns + options_.rules[next.firing.rule].after_ns;
    while (!stopping_ && clock_->MonotonicNs() < deadline) {
      clock_->WaitUntil(&wake_, &lock, deadline);
    }
    if (stopping_) {
      Log(absl::StrCat("trigger '", options_.rules[next.firing.rule].name,
                       "': the daemon stops; no capture of ", next.firing.reason));
      return;
    }
    lock.unlock();
    Take(next);
    lock.lock();
  }
}

void TriggerCaptures::Take(const Pending& pending) {
  const TriggerFiring& f = pending.firing;
  const TriggerRule& rule = options_.rules[f.rule];
  const uint64_t now = clock_->MonotonicNs();
  const int64_t offset = clock_->RealtimeNs() - static_cast<int64_t>(now);
  const uint64_t since = f.start_ns > rule.before_ns ? f.start_ns - rule.before_ns : 0;
  const uint64_t back_ns = now > since ? now - since : 0;
  const uint64_t unix_ms = static_cast<uint64_t>(static_cast<int64_t>(f.start_ns) + offset) /
                           1'000'000;
  // The rule and the anomaly's time (UTC) name the capture: the same on every host of a job.
  const std::string base = absl::StrCat(
      rule.name, "-",
      absl::FormatTime("%Y%m%d-%H%M%S", absl::FromUnixMillis(static_cast<int64_t>(unix_ms)),
                       absl::UTCTimeZone()));
  std::string id = base;
  for (int n = 2; fs::exists(fs::path(options_.output_root) / id); ++n) {
    id = absl::StrCat(base, "-", n);
  }

  nrtprof::StartCaptureRequest start;
  start.set_capture_id(id);
  start.set_last_ms(static_cast<uint32_t>(std::min<uint64_t>((back_ns + 999'999) / 1'000'000,
                                                             UINT32_MAX)));
  if (pending.whole_job) {
    start.set_job(f.job.name);
    start.set_job_from_command_line(f.job.from_command_line);
  } else {
    start.add_pids(f.pid);
  }
  for (nrtprof::CaptureFileKind k : FileKinds(rule.files)) start.add_files(k);
  nrtprof::CaptureTrigger* why = start.mutable_trigger();
  why->set_rule(rule.name);
  why->set_condition(rule.text);
  why->set_reason(f.reason);
  why->set_value_ns(f.value_ns);
  why->set_threshold_ns(f.threshold_ns);
  why->set_unix_ms(unix_ms);
  absl::StatusOr<nrtprof::StartCaptureReply> started = core_->StartCapture(start);
  // The job's other hosts, for the same window, while it is in their recorders too; each on a
  // thread of its own, so that a peer that does not answer holds up nothing here.
  if (pending.whole_job && !peer_stubs_.empty()) AskPeers(f.rule, start);
  absl::StatusOr<nrtprof::CaptureFiles> files;
  if (started.ok()) {
    nrtprof::StopCaptureRequest stop;
    stop.set_capture_id(started->capture_id());
    stop.set_wait_ms(options_.stop_wait_ms);
    files = core_->StopCapture(stop);
  } else {
    files = started.status();
  }
  if (!files.ok()) {
    Log(absl::StrCat("trigger '", rule.name, "': the capture of ", f.reason,
                     " could not be written: ", files.status().message()));
    std::lock_guard<std::mutex> lock(mu_);
    ++rule_counts_[f.rule].failed;
    return;
  }
  // The folder's mark: a triggered capture, which the budget may remove.
  const std::string dir = files->output_dir();
  std::string marker = MarkerStart(id, *why);
  if (pending.whole_job) {
    absl::StrAppend(&marker, ", \"job\": ", JsonString(f.job.name),
                    f.job.from_command_line ? ", \"job_from_command_line\": true" : "");
  } else {
    absl::StrAppend(&marker, ", \"pids\": [", f.pid, "]");
  }
  marker += "}\n";
  Kept kept;
  kept.capture_id = id;
  kept.dir = dir;
  kept.rule = rule.name;
  kept.reason = f.reason;
  kept.unix_ms = unix_ms;
  Log(absl::StrFormat("trigger '%s': wrote %s (%d events of %d processes)", rule.name, dir,
                      files->events(), files->processes()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++rule_counts_[f.rule].captures;
  }
  Keep(std::move(kept), marker);
}

void TriggerCaptures::Keep(Kept kept, const std::string& marker) {
  std::ofstream out(fs::path(kept.dir) / kMarkerFile);
  out << marker;
  if (!out.flush()) {
    Log(absl::StrCat("trigger '", kept.rule, "': cannot write ", kept.dir, "/", kMarkerFile,
                     "; the capture is kept, outside the triggered captures' budget"));
    return;
  }
  out.close();
  kept.bytes = FolderBytes(kept.dir);
  std::lock_guard<std::mutex> lock(mu_);
  kept_.push_back(std::move(kept));
  KeepBudget();
}

void TriggerCaptures::AdoptPeerCapture(const nrtprof::StartCaptureRequest& asked,
                                       const nrtprof::CaptureFiles& files) {
  const nrtprof::CaptureTrigger& t = asked.trigger();
  Kept kept;
  kept.dir = files.output_dir();
  kept.capture_id = fs::path(kept.dir).filename().string();
  kept.rule = t.rule();
  kept.reason = t.reason();
  // When the anomaly began on the asking daemon's clock; an older one does not say: now.
  kept.unix_ms = t.unix_ms() != 0 ? t.unix_ms()
                                  : static_cast<uint64_t>(clock_->RealtimeNs()) / 1'000'000;
  std::string marker = MarkerStart(kept.capture_id, t);
  absl::StrAppend(&marker, ", \"asked_by\": ", JsonString(t.asked_by()));
  if (!asked.job().empty()) {
    absl::StrAppend(&marker, ", \"job\": ", JsonString(asked.job()),
                    asked.job_from_command_line() ? ", \"job_from_command_line\": true" : "");
  }
  marker += "}\n";
  Log(absl::StrFormat("trigger '%s' of %s: wrote %s (%d events of %d processes)", t.rule(),
                      t.asked_by().empty() ? "a peer" : t.asked_by(), kept.dir, files.events(),
                      files.processes()));
  Keep(std::move(kept), marker);
}

void TriggerCaptures::AskPeers(size_t rule, const nrtprof::StartCaptureRequest& local) {
  nrtprof::StartCaptureRequest start = local;
  start.clear_pids();  // the peer has its own processes of the job (start.job)
  start.mutable_trigger()->set_reason(
      absl::StrCat("asked by ", options_.host, ": ", local.trigger().reason()));
  start.mutable_trigger()->set_asked_by(options_.host);
  std::lock_guard<std::mutex> lock(asks_mu_);
  for (auto it = asks_.begin(); it != asks_.end();) {  // the asks done: joined
    if (it->done) {
      it->thread.join();
      it = asks_.erase(it);
    } else {
      ++it;
    }
  }
  if (asks_stopping_) return;
  for (size_t i = 0; i < peer_stubs_.size(); ++i) {
    if (in_flight_[i] >= kMaxAsksInFlight) {
      {
        std::lock_guard<std::mutex> counts_lock(mu_);
        ++rule_counts_[rule].peer_failed;
      }
      LogPeerFailure(absl::StrCat("trigger '", options_.rules[rule].name, "': peer ",
                                  options_.peers[i], " was not asked for the window: ",
                                  kMaxAsksInFlight, " asks of it are still in flight"));
      continue;
    }
    ++in_flight_[i];
    asks_.emplace_back();
    const auto ask = std::prev(asks_.end());
    // The thread reads and writes *ask under asks_mu_ only, which is held here until it is set.
    ask->thread = std::thread([this, i, rule, start, ask] {
      AskPeer(i, rule, start, &*ask);
      std::lock_guard<std::mutex> done_lock(asks_mu_);
      --in_flight_[i];
      ask->done = true;
    });
  }
}

void TriggerCaptures::AskPeer(size_t i, size_t rule, const nrtprof::StartCaptureRequest& start,
                              Ask* ask) {
  const std::string& peer = options_.peers[i];
  // The call in flight, for Stop to cancel: the start, then the stop. Null once Stop began.
  auto begin_call = [this, ask](std::chrono::system_clock::duration within) {
    auto context = std::make_shared<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + within);
    std::lock_guard<std::mutex> lock(asks_mu_);
    if (asks_stopping_) return std::shared_ptr<grpc::ClientContext>();
    ask->context = context;
    return context;
  };
  grpc::Status s(grpc::StatusCode::CANCELLED, "the daemon stops");
  nrtprof::CaptureFiles files;
  if (std::shared_ptr<grpc::ClientContext> started_context = begin_call(options_.peer_timeout)) {
    nrtprof::StartCaptureReply started;
    s = peer_stubs_[i]->StartCapture(started_context.get(), start, &started);
    if (s.ok()) {
      // Writing the files may take a while on a busy peer: on this thread, nobody waits.
      if (std::shared_ptr<grpc::ClientContext> stop_context =
              begin_call(std::chrono::seconds(60))) {
        nrtprof::StopCaptureRequest stop;
        stop.set_capture_id(started.capture_id());
        stop.set_wait_ms(options_.stop_wait_ms);
        s = peer_stubs_[i]->StopCapture(stop_context.get(), stop, &files);
      } else {
        s = grpc::Status(grpc::StatusCode::CANCELLED, "the daemon stops");
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++(s.ok() ? rule_counts_[rule].peer_captures : rule_counts_[rule].peer_failed);
  }
  if (s.ok()) {
    Log(absl::StrFormat("trigger '%s': peer %s wrote %s (%d events of %d processes)",
                        options_.rules[rule].name, peer, files.output_dir(), files.events(),
                        files.processes()));
    return;
  }
  const std::string why = s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                              ? absl::StrCat("no answer in time (", s.error_message(), ")")
                              : s.error_message();
  LogPeerFailure(absl::StrCat("trigger '", options_.rules[rule].name, "': peer ", peer,
                              " did not take the window: ", why));
}

void TriggerCaptures::LogPeerFailure(const std::string& line) {
  // What the limiter lets through: the line, after one counting those it left out, if any.
  for (absl::string_view admitted :
       absl::StrSplit(peer_log_.Admit(line + "\n"), '\n', absl::SkipEmpty())) {
    absl::ConsumePrefix(&admitted, "nrtprofd: ");  // Log's own
    Log(std::string(admitted));
  }
}

void TriggerCaptures::FindKept() {
  std::vector<Kept> found;
  std::error_code ec;
  for (fs::directory_iterator it(options_.output_root, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code dir_ec;
    if (!it->is_directory(dir_ec) || it->is_symlink(dir_ec)) continue;
    std::ifstream in(it->path() / kMarkerFile);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    nrtprof::TriggeredCapture marked;
    google::protobuf::util::JsonParseOptions parse;
    parse.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(text.str(), &marked, parse).ok()) {
      Log(absl::StrCat(it->path().string(), "/", kMarkerFile,
                       " does not read; that folder is left out of the triggered captures"));
      continue;
    }
    Kept k;
    k.capture_id = it->path().filename().string();
    k.dir = it->path().string();
    k.rule = marked.rule();
    k.reason = marked.reason();
    k.unix_ms = marked.unix_ms();
    k.bytes = FolderBytes(k.dir);
    found.push_back(std::move(k));
  }
  std::sort(found.begin(), found.end(), [](const Kept& a, const Kept& b) {
    return a.unix_ms != b.unix_ms ? a.unix_ms < b.unix_ms : a.capture_id < b.capture_id;
  });
  std::lock_guard<std::mutex> lock(mu_);
  kept_.insert(kept_.begin(), found.begin(), found.end());
}

void TriggerCaptures::KeepBudget() {
  uint64_t total = 0;
  for (const Kept& k : kept_) total += k.bytes;
  while (total > options_.budget_bytes && !kept_.empty()) {
    const Kept oldest = kept_.front();
    kept_.erase(kept_.begin());
    total -= oldest.bytes;
    // Only a folder the daemon marked: a capture someone asked for has no trigger.json.
    std::error_code ec;
    if (fs::exists(fs::path(oldest.dir) / kMarkerFile, ec)) fs::remove_all(oldest.dir, ec);
    if (ec) {
      Log(absl::StrCat("cannot remove the triggered capture ", oldest.dir, ": ", ec.message()));
    } else {
      Log(absl::StrFormat(
          "removed the triggered capture %s (%d bytes, rule '%s'): the triggered captures keep "
          "within %d bytes (--trigger_budget_bytes)",
          oldest.dir, oldest.bytes, oldest.rule, options_.budget_bytes));
    }
    for (size_t i = 0; i < options_.rules.size(); ++i) {
      if (options_.rules[i].name == oldest.rule) ++rule_counts_[i].removed;
    }
  }
}

void TriggerCaptures::FillStatus(nrtprof::StatusReply* reply) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < options_.rules.size(); ++i) {
    nrtprof::TriggerRuleStatus* r = reply->add_triggers();
    r->set_name(options_.rules[i].name);
    r->set_condition(options_.rules[i].text);
    r->set_triggers(counts_[i].triggers);
    r->set_suppressed(counts_[i].suppressed);
    r->set_captures(rule_counts_[i].captures);
    r->set_failed(rule_counts_[i].failed);
    r->set_removed(rule_counts_[i].removed);
    r->set_peer_captures(rule_counts_[i].peer_captures);
    r->set_peer_failed(rule_counts_[i].peer_failed);
  }
  uint64_t total = 0;
  for (const Kept& k : kept_) {
    nrtprof::TriggeredCapture* c = reply->add_triggered_captures();
    c->set_capture_id(k.capture_id);
    c->set_output_dir(k.dir);
    c->set_rule(k.rule);
    c->set_reason(k.reason);
    c->set_unix_ms(k.unix_ms);
    c->set_bytes(k.bytes);
    total += k.bytes;
  }
  reply->set_triggered_bytes(total);
  reply->set_triggered_bytes_limit(options_.budget_bytes);
}

std::string RenderTriggerMetrics(const nrtprof::StatusReply& status) {
  // A daemon without rules may keep the captures its peers asked for: their bytes only.
  if (status.triggers().empty() && status.triggered_captures().empty()) return "";
  std::string out;
  auto counter = [&](const char* name, const char* help, auto value) {
    if (status.triggers().empty()) return;
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n");
    for (const nrtprof::TriggerRuleStatus& r : status.triggers()) {
      // Rule names are letters, digits, '_' and '-' (triggers.h): nothing to escape.
      absl::StrAppend(&out, name, "{rule=\"", r.name(), "\"} ", value(r), "\n");
    }
  };
  counter("nrtprof_triggers_total", "anomalies each trigger rule saw (nrtprofd --trigger)",
          [](const nrtprof::TriggerRuleStatus& r) { return r.triggers(); });
  counter("nrtprof_triggers_suppressed_total",
          "of those, within the rule's interval of its last capture: no capture",
          [](const nrtprof::TriggerRuleStatus& r) { return r.suppressed(); });
  counter("nrtprof_triggered_captures_total", "captures the rules took",
          [](const nrtprof::TriggerRuleStatus& r) { return r.captures(); });
  counter("nrtprof_triggered_captures_failed_total", "captures the rules could not write",
          [](const nrtprof::TriggerRuleStatus& r) { return r.failed(); });
  counter("nrtprof_triggered_captures_removed_total",
          "triggered captures removed to keep --trigger_budget_bytes",
          [](const nrtprof::TriggerRuleStatus& r) { return r.removed(); });
  counter("nrtprof_triggered_peer_captures_total",
          "peers (--trigger_peers) that wrote a rule's window when asked",
          [](const nrtprof::TriggerRuleStatus& r) { return r.peer_captures(); });
  counter("nrtprof_triggered_peer_failed_total", "peers that did not",
          [](const nrtprof::TriggerRuleStatus& r) { return r.peer_failed(); });
  absl::StrAppend(&out,
                  "# HELP nrtprof_triggered_captures_bytes what the triggered captures kept take "
                  "on disk\n# TYPE nrtprof_triggered_captures_bytes gauge\n"
                  "nrtprof_triggered_captures_bytes ",
                  status.triggered_bytes(),
                  "\n# HELP nrtprof_triggered_captures_bytes_limit --trigger_budget_bytes\n"
                  "# TYPE nrtprof_triggered_captures_bytes_limit gauge\n"
                  "nrtprof_triggered_captures_bytes_limit ",
                  status.triggered_bytes_limit(), "\n");
  return out;
}

}  // namespace nrtprof::daemon
