#include "shim/backend/device_profile.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace nrtprof::shim {
namespace {

// What the daemon refuses a whole batch for: a span over a week, or past the clock's end.
constexpr uint64_t kMaxSpanNs = 7ull * 24 * 3600 * 1000000000;

bool Plausible(uint64_t start_ns, uint64_t duration_ns) {
  return duration_ns <= kMaxSpanNs && start_ns <= UINT64_MAX - duration_ns;
}

// A file's text; empty if it cannot be read. Never follows a symbolic link.
std::string ReadWhole(const std::string& path) {
  std::string text;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return text;
  char buffer[65536];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

}  // namespace

DeviceProfileFunctions ResolveDeviceProfile(const CoreState* core) {
  auto find = [core](ApiFunction fn) -> void* {
    if (void* p = core->real_functions[fn].load(std::memory_order_acquire)) return p;
    void* load = core->real_functions[kNrtLoad].load(std::memory_order_acquire);
    Dl_info info;
    if (load == nullptr || dladdr(load, &info) == 0 || info.dli_fname == nullptr) return nullptr;
    void* handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    void* p = handle != nullptr ? core->real_dlsym(handle, ApiFunctionName(fn)) : nullptr;
    if (handle != nullptr) dlclose(handle);  // loaded still: the program's reference holds it
    dlerror();  // a failed look-up's message is not for the program's next dlerror()
    return p;
  };
  DeviceProfileFunctions f;
  f.start = reinterpret_cast<decltype(f.start)>(find(kNrtProfileStart));
  f.stop = reinterpret_cast<decltype(f.stop)>(find(kNrtProfileStop));
  return f;
}

DeviceProfiler::DeviceProfiler(ResolveFn resolve, NoticeFn notice, StringTable* strings,
                               std::string temp_root)
    : resolve_(std::move(resolve)), notice_(std::move(notice)), strings_(strings),
      temp_root_(std::move(temp_root)) {}

const DeviceProfileFunctions& DeviceProfiler::FunctionsLocked() {
  if (!resolved_) {
    fns_ = resolve_();
    resolved_ = true;
  }
  return fns_;
}

void DeviceProfiler::OnRuntimeInit() {
  std::lock_guard<std::mutex> lock(mu_);
  resolved_ = false;
  models_.clear();
}

void DeviceProfiler::OnModelLoaded(nrt_model_t* model) {
  std::lock_guard<std::mutex> lock(mu_);
  // A handle seen before is a new model (its unload passed the profiler by): what was kept of
  // the old one is collected first.
  Model& m = models_[model];
  CollectOwnLocked(&m);
  m = Model();
  StartOwnLocked(model, &m);
}

void DeviceProfiler::StartOwnLocked(nrt_model_t* model, Model* m) {
  if (!restart_ || !m->own_file.empty() || !m->app_file.empty()) return;
  const DeviceProfileFunctions& fns = FunctionsLocked();
  if (fns.start == nullptr || fns.stop == nullptr) return;
  if (folder_.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string root = !temp_root_.empty() ? temp_root_
                       : tmp != nullptr && tmp[0] == '/' ? tmp
                                                         : "/tmp";
    std::string pattern = root + "/nrtprof-profile-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {  // 0700, a name no one could guess
      restart_ = false;
      notice_("nrtprof: cannot make a folder for device profiles under " + root +
              "; executions have no ops inside\n");
      return;
    }
    folder_ = std::move(pattern);
  }
  std::string path = folder_ + "/profile-" + std::to_string(++next_file_) + ".json";
  if (fns.start(model, path.c_str()) == NRT_SUCCESS) m->own_file = std::move(path);
}

void DeviceProfiler::CollectOwnLocked(Model* m, nrt_model_t* restart) {
  if (m->own_file.empty()) return;
  const std::string path = std::move(m->own_file);
  m->own_file.clear();
  const bool stopped = FunctionsLocked().stop(path.c_str()) == NRT_SUCCESS;
  // Started again at once, before the file is read: an execution that ends between the stop
  // and the start is in no profile.
  if (restart != nullptr) StartOwnLocked(restart, m);
  if (stopped) ReadFileLocked(path);
}

void DeviceProfiler::ReadFileLocked(const std::string& path) {
  std::string text = ReadWhole(path);
  if (!LooksLikeJson(text)) {
    // Not the simulator's JSON: the real runtime's NTFF, for its own tools. Left where it is.
    ++unread_files_;
    if (restart_) {
      restart_ = false;
      notice_("nrtprof: the runtime's device profiles are not JSON (the real runtime writes "
              "NTFF, which nrtprof does not decode): left unread in " + folder_ +
              "; executions have no ops inside, and device profiling stops\n");
    }
    return;
  }
  unlink(path.c_str());
  if (queued_bytes_ + text.size() > kMaxQueuedBytes) {
    overflow_total_ += CountProfileEntries(text);
    return;
  }
  queued_bytes_ += text.size();
  documents_.push_back(std::move(text));
}

void DeviceProfiler::BeforeModelUnload(nrt_model_t* model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  if (it == models_.end()) return;
  CollectOwnLocked(&it->second);
  models_.erase(it);
}

void DeviceProfiler::BeforeRuntimeClose() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [model, m] : models_) CollectOwnLocked(&m);
  models_.clear();  // the runtime discards every profile at close
}

NRT_STATUS DeviceProfiler::AppStart(nrt_model_t* model, const char* filename) {
  std::lock_guard<std::mutex> lock(mu_);
  const DeviceProfileFunctions& fns = FunctionsLocked();
  if (fns.start == nullptr) return NRT_FAILURE;
  auto it = models_.find(model);
  const bool was_own = it != models_.end() && !it->second.own_file.empty();
  if (was_own) CollectOwnLocked(&it->second);
  const NRT_STATUS status = fns.start(model, filename);
  if (it == models_.end()) return status;
  if (status == NRT_SUCCESS && filename != nullptr) {
    it->second.app_file = filename;
  } else if (was_own) {
    StartOwnLocked(model, &it->second);
  }
  return status;
}

NRT_STATUS DeviceProfiler::AppStop(const char* filename) {
  std::lock_guard<std::mutex> lock(mu_);
  const DeviceProfileFunctions& fns = FunctionsLocked();
  if (fns.stop == nullptr) return NRT_FAILURE;
  const NRT_STATUS status = fns.stop(filename);
  if (status != NRT_SUCCESS || filename == nullptr) return status;
  for (auto& [model, m] : models_) {
    if (m.app_file == filename) {
      m.app_file.clear();
      StartOwnLocked(model, &m);
      break;
    }
  }
  return status;
}

void DeviceProfiler::Collect(uint64_t now_ns, bool final, bool capturing,
                             absl::FunctionRef<void(nrtprof::Event&)> sink) {
  if (next_collect_ns_ == 0) next_collect_ns_ = now_ns + period_ns_;
  std::deque<std::string> documents;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (final || (period_ns_ != 0 && now_ns >= next_collect_ns_)) {
      next_collect_ns_ = now_ns + period_ns_;
      for (auto& [model, m] : models_) CollectOwnLocked(&m, final ? nullptr : model);
      if (final && !folder_.empty()) rmdir(folder_.c_str());  // kept if a file was left
    }
    documents.swap(documents_);
    queued_bytes_ = 0;
  }
  for (std::string& text : documents) {
    Parse(text, capturing, sink);
    text = std::string();  // its memory back at once
  }
}

void DeviceProfiler::Parse(const std::string& text, bool capturing,
                           absl::FunctionRef<void(nrtprof::Event&)> sink) {
  std::vector<nrtprof::Event> events;
  uint64_t implausible = 0;
  DeviceProfileReadStats stats;
  std::string error;
  const bool ok = ReadDeviceProfile(
      text,
      [&](const DeviceProfileEntry& e) {
        if (!capturing) return;
        if (!Plausible(e.start_ns, e.duration_ns)) {
          ++implausible;
          return;
        }
        const bool op = e.kind == DeviceProfileEntry::Kind::kOp;
        nrtprof::Event& event = events.emplace_back();
        event.set_kind(op ? nrtprof::EVENT_DEVICE_OP : nrtprof::EVENT_DEVICE_DMA);
        event.set_start_ns(e.start_ns);
        event.set_duration_ns(e.duration_ns);
        event.set_name_iid(strings_->Intern(e.name));
        event.set_nc_idx(static_cast<int32_t>(e.nc_idx));
        event.set_exec_id(e.exec_id);
        if (!e.model.empty()) event.set_model_name_iid(strings_->Intern(e.model));
        if (op) {
          event.set_engine_iid(strings_->Intern(e.engine));
        } else {
          event.set_bytes(e.bytes);
          event.set_tensor_name_iid(strings_->Intern(e.tensor));
        }
      },
      &stats, &error);
  if (!ok) {
    malformed_total_ += std::max(CountProfileEntries(text), stats.entries);
    return;
  }
  malformed_total_ += implausible;
  for (nrtprof::Event& event : events) sink(event);
}

uint64_t DeviceProfiler::overflow_total() {
  std::lock_guard<std::mutex> lock(mu_);
  return overflow_total_;
}

uint64_t DeviceProfiler::unread_files() {
  std::lock_guard<std::mutex> lock(mu_);
  return unread_files_;
}

std::string DeviceProfiler::folder() {
  std::lock_guard<std::mutex> lock(mu_);
  return folder_;
}

}  // namespace nrtprof::shim
