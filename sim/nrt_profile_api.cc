// The runtime's own profiling (nrt/nrt_profile.h beyond nrt_profile_start/stop, which live in
// nrt_api.cc) and nrt_get_status_as_str (nrt/nrt_status.h).
//
// An inspect session is the runtime's system trace captured for the session's reader
// (TraceReader::kInspect in sys_trace.h): its own rings and filters, started at the begin and
// fetched-and-stopped in one call at the stop, then written as JSON to the session's folder.
// A nrt_sys_trace_* capture in the same process has a capture of its own, so the two never take
// each other's events. What the simulator cannot capture (device profiles, host memory, CPU
// use, continuous device profiling) is said once on stderr. sim/README.md, "The runtime's own
// profiling", is the user's account of all this.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/nrt_status_names.h"
#include "nrt/nrt.h"
#include "nrt/nrt_profile.h"
#include "nrt/nrt_status.h"
#include "runtime.h"
#include "sys_trace.h"

namespace {

using nrtsim::ReportError;

// The inspect activity types, as bits of nrt_inspect_config::activities.
enum Activity : uint32_t {
  kSystemProfile = 1u << 0,
  kDeviceProfile = 1u << 1,
  kHostMemory = 1u << 2,
  kCpuUtil = 1u << 3,
};
constexpr uint32_t kAllActivities = kSystemProfile | kDeviceProfile | kHostMemory | kCpuUtil;
struct ActivityName {
  Activity bit;
  const char* name;
};
constexpr ActivityName kActivities[] = {{kSystemProfile, "system_profile"},
                                        {kDeviceProfile, "device_profile"},
                                        {kHostMemory, "host_memory"},
                                        {kCpuUtil, "cpu_util"}};

constexpr char kDefaultOutputDir[] = "./output";
// SysTrace::Start's bounds on a core's ring.
constexpr uint64_t kMaxEventsPerNc = 1u << 24;

// Says `line` on stderr the first time only: a program that asks for something the simulator
// cannot do every step hears it once.
void SayOnce(const std::string& line) {
  static std::mutex mu;
  static std::set<std::string>* said = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (said->insert(line).second) ReportError(line);
}

NRT_STATUS Invalid(const std::string& line) {
  ReportError(line);
  return NRT_INVALID;
}

// A malloc'ed array of malloc'ed copies of the names of the activities in `bits`, as the C
// caller may free them itself.
NRT_STATUS ActivityList(uint32_t bits, const char*** types, size_t* count) {
  const char** list = static_cast<const char**>(calloc(4, sizeof(const char*)));
  if (list == nullptr) return NRT_RESOURCE;
  size_t n = 0;
  for (const ActivityName& a : kActivities) {
    if ((bits & a.bit) == 0) continue;
    list[n] = strdup(a.name);
    if (list[n] == nullptr) {
      nrt_inspect_config_free_activity_types(list, n);
      return NRT_RESOURCE;
    }
    ++n;
  }
  *types = list;
  *count = n;
  return NRT_SUCCESS;
}

}  // namespace

struct nrt_inspect_config {
  int session_id = 1;
  std::string output_dir = kDefaultOutputDir;
  uint32_t activities = kAllActivities;
  nrtsim::TraceCaptureConfig trace;  // ring size, cores, event types
  bool enable_inspect = false;
  bool enable_inspect_on_fail = false;
};

struct nrt_profile_continuous_options {
  std::string output_dir = kDefaultOutputDir;
};

namespace {

// The session in progress, if any. A session ends only with nrt_inspect_stop(): nrt_close()
// drops what the runtime captured for it (its system trace goes with the runtime), and the
// stop then says so.
struct InspectSession {
  bool active = false;
  bool system_trace = false;  // captured and written at the stop
  int session_id = 0;
  std::string output_dir;
};

std::mutex session_mu;
InspectSession& Session() {
  static InspectSession* session = new InspectSession();
  return *session;
}

NRT_STATUS Begin(const nrt_inspect_config& config, const char* fn) {
  std::lock_guard<std::mutex> lock(session_mu);
  InspectSession& session = Session();
  if (session.active) {
    return Invalid(absl::StrCat(fn, ": an inspect session is in progress already"));
  }
  const uint32_t asked = config.enable_inspect ? config.activities : 0;
  const bool system_trace = (asked & kSystemProfile) != 0;
  std::vector<std::string> cannot;
  for (const ActivityName& a : kActivities) {
    if (a.bit != kSystemProfile && (asked & a.bit) != 0) cannot.push_back(a.name);
  }
  if (config.enable_inspect_on_fail) cannot.push_back("enable_inspect_on_fail");
  if (!cannot.empty()) {
    SayOnce(absl::StrCat(fn, ": ", absl::StrJoin(cannot, ", "),
                         cannot.size() == 1 ? " is" : " are",
                         " not supported by the simulated runtime",
                         system_trace ? "; the session captures system_profile only" : ""));
    if (!system_trace) return NRT_FAILURE;
  }
  // A session that captures nothing starts a capture of no core all the same: the runtime's
  // state (initialized, closed) answers for every session alike.
  nrtsim::TraceCaptureConfig trace = config.trace;
  trace.reader = nrtsim::TraceReader::kInspect;
  if (!system_trace) trace.enabled_cores = 0;
  NRT_STATUS s = nrtsim::Runtime::Get().TraceStart(trace);
  if (s != NRT_SUCCESS) return s;
  session.active = true;
  session.system_trace = system_trace;
  session.session_id = config.session_id;
  session.output_dir = config.output_dir;
  return NRT_SUCCESS;
}

// Writes `contents` to `path` whole or not at all (a temporary file renamed over it).
bool WriteWhole(const std::filesystem::path& path, const std::string& contents,
                std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    *error = absl::StrCat("cannot make ", path.parent_path().string(), ": ", ec.message());
    return false;
  }
  const std::string tmp = absl::StrCat(path.string(), ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) {
      *error = absl::StrCat("cannot write ", tmp, ": ", strerror(errno));
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    *error = absl::StrCat("cannot rename ", tmp, " to ", path.string(), ": ", ec.message());
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

// NEURON_RT_INSPECT_* flags: unset or empty is `fallback`; "0" and "1" (and, where
// `profile_modes`, the device profile's "model" and "session", both on) are read; anything else
// is malformed.
bool EnvFlag(const char* name, bool fallback, bool profile_modes, bool* value) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') {
    *value = fallback;
    return true;
  }
  const std::string v = text;
  if (v == "0" || v == "1") {
    *value = v == "1";
    return true;
  }
  if (profile_modes && (v == "model" || v == "session")) {
    *value = true;
    return true;
  }
  ReportError(absl::StrCat("nrt_inspect_begin: ", name, "=\"", v, "\" is not ",
                           profile_modes ? "0, 1, model or session" : "0 or 1"));
  return false;
}

NRT_STATUS ContinuousNotSupported() {
  SayOnce("continuous device profiling (nrt_profile_continuous_start, _save, _stop) is not "
          "supported by the simulated runtime");
  return NRT_FAILURE;
}

}  // namespace

extern "C" {

// --- nrt_status.h ---

const char* nrt_get_status_as_str(NRT_STATUS status) {
  const char* name = nrtprof::NrtStatusName(static_cast<int>(status));
  return name != nullptr ? name : "UNKNOWN";
}

// --- nrt_profile.h: continuous device profiling ---

NRT_STATUS nrt_profile_continuous_options_allocate(nrt_profile_continuous_options_t** options) {
  if (options == nullptr) {
    return Invalid("nrt_profile_continuous_options_allocate: null output pointer");
  }
  *options = new (std::nothrow) nrt_profile_continuous_options();
  return *options == nullptr ? NRT_RESOURCE : NRT_SUCCESS;
}

NRT_STATUS nrt_profile_continuous_options_free(nrt_profile_continuous_options_t* options) {
  if (options == nullptr) return Invalid("nrt_profile_continuous_options_free: null options");
  delete options;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_profile_continuous_options_set_output_dir(nrt_profile_continuous_options_t* options,
                                                         const char* output_dir) {
  if (options == nullptr || output_dir == nullptr || *output_dir == '\0') {
    return Invalid("nrt_profile_continuous_options_set_output_dir: null options or an empty "
                   "directory");
  }
  options->output_dir = output_dir;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_profile_continuous_start(nrt_profile_continuous_options_t*) {
  return ContinuousNotSupported();
}

NRT_STATUS nrt_profile_continuous_save(uint32_t, nrt_profile_continuous_options_t*) {
  return ContinuousNotSupported();
}

NRT_STATUS nrt_profile_continuous_stop() { return ContinuousNotSupported(); }

// --- nrt_profile.h: inspect options ---

NRT_STATUS nrt_inspect_config_allocate(nrt_inspect_config_t** options) {
  if (options == nullptr) return Invalid("nrt_inspect_config_allocate: null output pointer");
  *options = new (std::nothrow) nrt_inspect_config();
  return *options == nullptr ? NRT_RESOURCE : NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_set_defaults(nrt_inspect_config_t* options) {
  if (options == nullptr) return Invalid("nrt_inspect_config_set_defaults: null options");
  *options = nrt_inspect_config();
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_free(nrt_inspect_config_t* options) {
  if (options == nullptr) return Invalid("nrt_inspect_config_free: null options");
  delete options;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_set_session_id(nrt_inspect_config_t* options, int session_id) {
  if (options == nullptr) return Invalid("nrt_inspect_config_set_session_id: null options");
  options->session_id = session_id;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_set_output_dir(nrt_inspect_config_t* options,
                                             const char* output_dir) {
  if (options == nullptr || output_dir == nullptr || *output_dir == '\0') {
    return Invalid("nrt_inspect_config_set_output_dir: null options or an empty directory");
  }
  try {
    options->output_dir = output_dir;
  } catch (const std::bad_alloc&) {
    return NRT_RESOURCE;
  }
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_set_sys_trace_max_events_per_nc(
    nrt_inspect_config_t* options, uint64_t sys_trace_max_events_per_nc) {
  if (options == nullptr) {
    return Invalid("nrt_inspect_config_set_sys_trace_max_events_per_nc: null options");
  }
  if (sys_trace_max_events_per_nc == 0 || sys_trace_max_events_per_nc > kMaxEventsPerNc) {
    return Invalid(absl::StrCat("nrt_inspect_config_set_sys_trace_max_events_per_nc: ",
                                sys_trace_max_events_per_nc, " is not from 1 to ",
                                kMaxEventsPerNc));
  }
  options->trace.max_events_per_nc = sys_trace_max_events_per_nc;
  return NRT_SUCCESS;
}

// Cores from 64 up never exist in the simulator (NRT_SIM_NUM_CORES is at most 64): accepted,
// and nothing to capture.
NRT_STATUS nrt_inspect_config_set_capture_enabled_for_nc(nrt_inspect_config_t* options,
                                                         uint32_t nc_idx, bool enabled) {
  if (options == nullptr) {
    return Invalid("nrt_inspect_config_set_capture_enabled_for_nc: null options");
  }
  if (nc_idx < 64) {
    const uint64_t bit = 1ull << nc_idx;
    uint64_t& cores = options->trace.enabled_cores;
    cores = enabled ? (cores | bit) : (cores & ~bit);
  }
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_set_capture_enabled_for_event_type_string(
    nrt_inspect_config_t* options, const char* event_type, bool enabled) {
  constexpr char fn[] = "nrt_inspect_config_set_capture_enabled_for_event_type_string";
  if (options == nullptr || event_type == nullptr) {
    return Invalid(absl::StrCat(fn, ": null options or event type"));
  }
  nrtsim::TraceEventType type;
  if (!nrtsim::TraceEventTypeFromName(event_type, &type)) {
    std::string quoted;
    nrtsim::AppendJsonString(event_type, &quoted);
    return Invalid(absl::StrCat(fn, ": ", quoted,
                                " is not an event type of nrt_sys_trace_get_event_types"));
  }
  options->trace.enabled_types[static_cast<int>(type)] = enabled;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_set_enable_inspect(nrt_inspect_config_t* options,
                                                 bool enable_inspect) {
  if (options == nullptr) return Invalid("nrt_inspect_config_set_enable_inspect: null options");
  options->enable_inspect = enable_inspect;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_set_enable_inspect_on_fail(nrt_inspect_config_t* options,
                                                         bool enable_inspect_on_fail) {
  if (options == nullptr) {
    return Invalid("nrt_inspect_config_set_enable_inspect_on_fail: null options");
  }
  options->enable_inspect_on_fail = enable_inspect_on_fail;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_inspect_config_get_all_activity_types(const char*** activity_types,
                                                     size_t* count) {
  if (activity_types == nullptr || count == nullptr) {
    return Invalid("nrt_inspect_config_get_all_activity_types: null output pointer");
  }
  return ActivityList(kAllActivities, activity_types, count);
}

NRT_STATUS nrt_inspect_config_get_enabled_activity_types(nrt_inspect_config_t* options,
                                                         const char*** activity_types,
                                                         size_t* count) {
  if (options == nullptr || activity_types == nullptr || count == nullptr) {
    return Invalid("nrt_inspect_config_get_enabled_activity_types: null options or output "
                   "pointer");
  }
  return ActivityList(options->activities, activity_types, count);
}

void nrt_inspect_config_free_activity_types(const char** activity_types, size_t count) {
  if (activity_types == nullptr) return;
  for (size_t i = 0; i < count; ++i) free(const_cast<char*>(activity_types[i]));
  free(activity_types);
}

NRT_STATUS nrt_inspect_config_set_activity(nrt_inspect_config_t* options,
                                           const char* activity_type, bool enabled) {
  if (options == nullptr || activity_type == nullptr) {
    return Invalid("nrt_inspect_config_set_activity: null options or activity type");
  }
  uint32_t bits = 0;
  if (strcmp(activity_type, "all") == 0) bits = kAllActivities;
  for (const ActivityName& a : kActivities) {
    if (strcmp(activity_type, a.name) == 0) bits = a.bit;
  }
  if (bits == 0) {
    std::string quoted;
    nrtsim::AppendJsonString(activity_type, &quoted);
    return Invalid(absl::StrCat("nrt_inspect_config_set_activity: ", quoted,
                                " is not system_profile, device_profile, host_memory, cpu_util "
                                "or all"));
  }
  options->activities = enabled ? (options->activities | bits) : (options->activities & ~bits);
  return NRT_SUCCESS;
}

// --- nrt_profile.h: inspect sessions ---

NRT_STATUS nrt_inspect_begin_with_options(nrt_inspect_config_t* options) {
  return Begin(options != nullptr ? *options : nrt_inspect_config(),
               "nrt_inspect_begin_with_options");
}

NRT_STATUS nrt_inspect_begin() {
  nrt_inspect_config config;
  bool enable = false, system = true, device = true, on_fail = false;
  if (!EnvFlag("NEURON_RT_INSPECT_ENABLE", false, false, &enable) ||
      !EnvFlag("NEURON_RT_INSPECT_SYSTEM_PROFILE", true, false, &system) ||
      !EnvFlag("NEURON_RT_INSPECT_DEVICE_PROFILE", true, true, &device) ||
      !EnvFlag("NEURON_RT_INSPECT_ON_FAIL", false, false, &on_fail)) {
    return NRT_INVALID;
  }
  const char* dir = getenv("NEURON_RT_INSPECT_OUTPUT_DIR");
  if (dir != nullptr && *dir != '\0') config.output_dir = dir;
  config.enable_inspect = enable;
  config.enable_inspect_on_fail = on_fail;
  config.activities = (system ? kSystemProfile : 0u) | (device ? kDeviceProfile : 0u);
  return Begin(config, "nrt_inspect_begin");
}

NRT_STATUS nrt_inspect_stop() {
  std::lock_guard<std::mutex> lock(session_mu);
  InspectSession& session = Session();
  if (!session.active) return Invalid("nrt_inspect_stop: no inspect session is in progress");
  const InspectSession ended = session;
  session = InspectSession();  // over, whatever follows
  nrtsim::TraceFetchOptions fetch;
  fetch.reader = nrtsim::TraceReader::kInspect;
  fetch.stop = true;
  std::string json;
  NRT_STATUS s = nrtsim::Runtime::Get().TraceFetch(fetch, &json);
  if (s != NRT_SUCCESS) return s;
  if (!ended.system_trace) return NRT_SUCCESS;  // the session captured nothing
  const std::filesystem::path path =
      std::filesystem::path(ended.output_dir) / absl::StrCat("sim_pid_", getpid()) /
      absl::StrCat("system_trace_session_", ended.session_id, ".json");
  std::string error;
  if (!WriteWhole(path, json, &error)) {
    ReportError(absl::StrCat("nrt_inspect_stop: ", error));
    return NRT_FAILURE;
  }
  return NRT_SUCCESS;
}

}  // extern "C"
