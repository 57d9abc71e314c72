#include "shim/backend/sys_trace_arbiter.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace nrtprof::shim {

SysTraceArbiter::SysTraceArbiter(uint64_t max_events_per_nc, ResolveFn resolve, DocumentSink sink,
                                 TypeFilter wants_type)
    : max_events_per_nc_(max_events_per_nc),
      resolve_(std::move(resolve)),
      sink_(std::move(sink)),
      wants_type_(wants_type) {}

const SysTraceFunctions& SysTraceArbiter::FunctionsLocked() {
  if (!resolved_) {
    fns_ = resolve_();
    resolved_ = true;
  }
  return fns_;
}

void SysTraceArbiter::StartOwnLocked() {
  if (!runtime_up_ || !wanted_ || state_ != State::kIdle) return;
  const SysTraceFunctions& fns = FunctionsLocked();
  if (!fns.CanCapture()) return;
  nrt_sys_trace_config_t* config = nullptr;
  if (fns.config_allocate(&config) != NRT_SUCCESS || config == nullptr) return;
  fns.config_set_max_events_per_nc(config, max_events_per_nc_);
  const char** types = nullptr;
  size_t count = 0;
  if (wants_type_ != nullptr && fns.config_set_event_type != nullptr &&
      fns.free_event_types != nullptr && fns.get_event_types != nullptr &&
      fns.get_event_types(&types, &count) == NRT_SUCCESS && types != nullptr) {
    // A type the runtime will not turn off is captured, and ignored as before.
    for (size_t i = 0; i < count; ++i) {
      if (types[i] != nullptr && !wants_type_(types[i])) {
        fns.config_set_event_type(config, types[i], false);
      }
    }
    fns.free_event_types(types, count);
  }
  const NRT_STATUS status = fns.start(config);
  fns.config_free(config);
  if (status == NRT_SUCCESS) {
    state_ = State::kOwn;
    ++generation_;
  }
}

bool SysTraceArbiter::FetchAllLocked(std::string* copy, bool lend) {
  const SysTraceFunctions& fns = FunctionsLocked();
  if (fns.fetch_events == nullptr) return false;
  char* buffer = nullptr;
  size_t size = 0;
  if (fns.fetch_events(&buffer, &size, nullptr) != NRT_SUCCESS || buffer == nullptr) {
    return false;
  }
  if (lend && copy == nullptr && lent_sink_) {
    try {
      lent_sink_(generation_, std::string_view(buffer, strnlen(buffer, size)));
    } catch (...) {
      if (fns.buffer_free != nullptr) fns.buffer_free(buffer);
      throw;
    }
    if (fns.buffer_free != nullptr) fns.buffer_free(buffer);
    return true;
  }
  std::string doc = std::move(spare_);
  spare_ = std::string();
  try {
    doc.assign(buffer, strnlen(buffer, size));
  } catch (...) {
    if (fns.buffer_free != nullptr) fns.buffer_free(buffer);
    throw;
  }
  if (fns.buffer_free != nullptr) fns.buffer_free(buffer);
  if (copy != nullptr) *copy = doc;
  sink_(generation_, std::move(doc));
  return true;
}

void SysTraceArbiter::Recycle(std::string document) {
  if (document.capacity() > kMaxSpareBytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (document.capacity() > spare_.capacity()) spare_ = std::move(document);
}

bool SysTraceArbiter::SuspendOwnLocked() {
  if (state_ != State::kOwn) return false;
  FetchAllLocked(nullptr);
  FunctionsLocked().stop();
  state_ = State::kIdle;
  return true;
}

void SysTraceArbiter::OnRuntimeInit() {
  std::lock_guard<std::mutex> lock(mu_);
  resolved_ = false;  // a new runtime: look again
  runtime_up_ = true;
  state_ = State::kIdle;
  has_stash_ = false;
  stash_.clear();
  StartOwnLocked();
}

void SysTraceArbiter::SetWanted(bool wanted) {
  std::lock_guard<std::mutex> lock(mu_);
  if (wanted == wanted_) return;
  wanted_ = wanted;
  if (wanted) {
    StartOwnLocked();
  } else {
    SuspendOwnLocked();
  }
}

void SysTraceArbiter::Poll(bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kOwn || (final && state_ == State::kApp)) {
    FetchAllLocked(nullptr, /*lend=*/true);
  }
}

void SysTraceArbiter::LendPolledDocuments(LentDocumentSink sink) {
  std::lock_guard<std::mutex> lock(mu_);
  lent_sink_ = std::move(sink);
}

void SysTraceArbiter::BeforeRuntimeClose() {
  mu_.lock();
  if (state_ != State::kIdle) FetchAllLocked(nullptr);
}

void SysTraceArbiter::AfterRuntimeClose() {
  runtime_up_ = false;
  state_ = State::kIdle;
  has_stash_ = false;
  stash_.clear();
  mu_.unlock();
}

NRT_STATUS SysTraceArbiter::AppStart(nrt_sys_trace_config_t* options) {
  std::lock_guard<std::mutex> lock(mu_);
  const SysTraceFunctions& fns = FunctionsLocked();
  if (fns.start == nullptr) return NRT_FAILURE;
  const bool was_own = SuspendOwnLocked();
  has_stash_ = false;
  stash_.clear();
  const NRT_STATUS status = fns.start(options);
  if (status == NRT_SUCCESS) {
    state_ = State::kApp;
    ++generation_;
  } else if (was_own) {
    StartOwnLocked();
  }
  return status;
}

NRT_STATUS SysTraceArbiter::AppStop() {
  std::lock_guard<std::mutex> lock(mu_);
  const SysTraceFunctions& fns = FunctionsLocked();
  if (fns.stop == nullptr) return NRT_FAILURE;
  if (state_ == State::kApp) {
    const NRT_STATUS status = fns.stop();
    if (status == NRT_SUCCESS) {
      state_ = State::kIdle;
      std::string leftovers;
      if (FetchAllLocked(&leftovers)) {
        stash_ = std::move(leftovers);
        has_stash_ = true;
      }
      StartOwnLocked();
    }
    return status;
  }
  const bool was_own = SuspendOwnLocked();
  const NRT_STATUS status = fns.stop();
  if (was_own) StartOwnLocked();
  return status;
}

NRT_STATUS SysTraceArbiter::AppFetch(char** buffer, size_t* written_size,
                                     const nrt_sys_trace_fetch_options_t* options) {
  std::lock_guard<std::mutex> lock(mu_);
  const SysTraceFunctions& fns = FunctionsLocked();
  if (fns.fetch_events == nullptr) return NRT_FAILURE;
  if (state_ == State::kApp) {
    const NRT_STATUS status = fns.fetch_events(buffer, written_size, options);
    if (status == NRT_SUCCESS && buffer != nullptr && *buffer != nullptr &&
        written_size != nullptr) {
      sink_(generation_, std::string(*buffer, strnlen(*buffer, *written_size)));
    }
    return status;
  }
  if (has_stash_ && buffer != nullptr && written_size != nullptr) {
    char* copy = static_cast<char*>(malloc(stash_.size() + 1));
    if (copy == nullptr) return NRT_RESOURCE;
    memcpy(copy, stash_.c_str(), stash_.size() + 1);
    handed_out_.insert(copy);
    *buffer = copy;
    *written_size = stash_.size();
    has_stash_ = false;
    stash_.clear();
    return NRT_SUCCESS;
  }
  const bool was_own = SuspendOwnLocked();
  const NRT_STATUS status = fns.fetch_events(buffer, written_size, options);
  if (was_own) StartOwnLocked();
  return status;
}

bool SysTraceArbiter::AppBufferFree(char* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffer == nullptr || handed_out_.erase(buffer) == 0) return false;
  free(buffer);
  return true;
}

bool SysTraceArbiter::own_capture_running() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kOwn;
}

bool SysTraceArbiter::app_capture_running() {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kApp;
}

uint64_t SysTraceArbiter::generation() {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

}  // namespace nrtprof::shim
