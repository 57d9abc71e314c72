#include "shim/preload/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/preload/record.h"

namespace nrtprof::shim {
namespace {

void Report(ReportFn report, const char* name, const char* value, const char* expected,
            const char* fallback) {
  char line[512];
  snprintf(line, sizeof(line), "nrtprof: %s='%.64s' is not %s; using %s\n", name, value,
           expected, fallback);
  report(line);
}

// An unsigned decimal integer, the whole string.
bool ParseUnsigned(const char* s, uint64_t max, uint64_t* out) {
  if (s[0] < '0' || s[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > max) return false;
  *out = v;
  return true;
}

bool CopyString(const char* s, char* dst, size_t size) {
  const size_t n = strnlen(s, size);
  if (n == size) return false;
  memcpy(dst, s, n + 1);
  return true;
}

// A job's name: 1 to kMaxJobBytes printable ASCII characters (space to '~'), copied to `dst`.
bool CopyJob(const char* s, char* dst) {
  size_t n = 0;
  for (; s[n] != '\0'; ++n) {
    if (n == kMaxJobBytes || s[n] < ' ' || s[n] > '~') return false;
  }
  if (n == 0) return false;
  memcpy(dst, s, n + 1);
  return true;
}

uint32_t RoundUpToPowerOfTwo(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

static void ParseVariables(GetenvFn get, ReportFn report, Config* config);

void ParseConfig(GetenvFn get, ReportFn report, Config* config) {
  ParseVariables(get, report, config);
  // A spool file is named by its capture: without one, lossless cannot be.
  if (config->requested_mode == ShimMode::kLossless && config->capture_id[0] == '\0') {
    report(
        "nrtprof: NRTPROF_MODE=lossless needs NRTPROF_CAPTURE (nrtprof run sets it); running "
        "best_effort\n");
    config->requested_mode = ShimMode::kBestEffort;
  }
}

static void ParseVariables(GetenvFn get, ReportFn report, Config* config) {
  *config = Config();
  char fallback[64];
  // A variable of milliseconds from `min` to `max`: *field, or one line and *field unchanged.
  auto milliseconds = [&](const char* name, uint32_t min, uint32_t max, uint32_t* field) {
    const char* v = get(name);
    if (v == nullptr || v[0] == '\0') return;
    uint64_t ms = 0;
    if (ParseUnsigned(v, max, &ms) && ms >= min) {
      *field = static_cast<uint32_t>(ms);
      return;
    }
    char expected[64];
    snprintf(expected, sizeof(expected), "milliseconds from %u to %u", min, max);
    snprintf(fallback, sizeof(fallback), "%u", *field);
    Report(report, name, v, expected, fallback);
  };

  if (const char* v = get("NRTPROF_DISABLE"); v != nullptr) {
    if (strcmp(v, "1") == 0) {
      config->disabled = true;
    } else if (strcmp(v, "0") != 0 && v[0] != '\0') {
      Report(report, "NRTPROF_DISABLE", v, "1 or 0", "0 (profiling on)");
    }
  }
  if (const char* v = get("NRTPROF_DEVICE_PROFILE"); v != nullptr) {
    if (strcmp(v, "1") == 0) {
      config->device_profile = true;
    } else if (strcmp(v, "0") != 0 && v[0] != '\0') {
      Report(report, "NRTPROF_DEVICE_PROFILE", v, "1 or 0", "0 (no device profiles)");
    }
  }
  milliseconds("NRTPROF_DEVICE_PROFILE_PERIOD_MS", 0, kMaxDeviceProfilePeriodMs,
               &config->device_profile_period_ms);
  if (const char* v = get("NRTPROF_ADDR"); v != nullptr) {
    if (!CopyString(v, config->addr, sizeof(config->addr))) {
      Report(report, "NRTPROF_ADDR", v, "an address under 512 bytes", "the default socket");
    }
  }
  if (const char* v = get("NRTPROF_SERVICE_USER"); v != nullptr) {
    if (!CopyString(v, config->service_user, sizeof(config->service_user))) {
      Report(report, "NRTPROF_SERVICE_USER", v, "a user under 256 bytes", "none");
    }
  }
  struct PathVariable {
    const char* name;
    char* dst;
    size_t size;
  };
  const PathVariable paths[] = {
      {"NRTPROF_TLS_CA", config->tls_ca, sizeof(config->tls_ca)},
      {"NRTPROF_TOKEN_FILE", config->token_file, sizeof(config->token_file)},
      {"NRTPROF_TLS_CERT", config->tls_cert, sizeof(config->tls_cert)},
      {"NRTPROF_TLS_KEY", config->tls_key, sizeof(config->tls_key)},
  };
  for (const PathVariable& p : paths) {
    const char* v = get(p.name);
    if (v != nullptr && !CopyString(v, p.dst, p.size)) {
      Report(report, p.name, v, "a path under 512 bytes", "none");
    }
  }
  if (const char* v = get("NRTPROF_CAPTURE"); v != nullptr) {
    if (!CopyString(v, config->capture_id, sizeof(config->capture_id))) {
      Report(report, "NRTPROF_CAPTURE", v, "a capture id under 256 bytes", "none");
    }
  }
  // The operator's label first; else the runtime's own name of the job, its collective root.
  static const char* const kJobVariables[] = {"NRTPROF_JOB", "NEURON_RT_ROOT_COMM_ID"};
  for (const char* name : kJobVariables) {
    const char* v = get(name);
    if (v == nullptr || v[0] == '\0') continue;
    if (!CopyJob(v, config->job)) {
      Report(report, name, v, "a job of 1 to 255 printable ASCII characters", "no job");
      config->job[0] = '\0';
    }
    break;
  }
  // The process's rank as its launcher gave it: torchrun's first, then the Neuron JAX plugin's
  // process index, then the MPI launchers' and Slurm's. The first one set decides; a value that
  // is not a rank is refused (one line), not passed over for the next.
  static const char* const kRankVariables[] = {"RANK", "NEURON_PJRT_PROCESS_INDEX",
                                               "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                               "SLURM_PROCID"};
  for (const char* name : kRankVariables) {
    const char* v = get(name);
    if (v == nullptr || v[0] == '\0') continue;
    uint64_t rank = 0;
    if (ParseUnsigned(v, 0x7fffffff, &rank)) {
      config->rank = static_cast<int32_t>(rank);
    } else {
      Report(report, name, v, "a rank from 0 to 2147483647", "none");
    }
    break;
  }
  if (const char* v = get("NRTPROF_STACKS"); v != nullptr && v[0] != '\0') {
    uint64_t depth = 0;
    if (ParseUnsigned(v, kMaxStackDepth, &depth)) {
      config->stack_depth = static_cast<uint32_t>(depth);
    } else {
      Report(report, "NRTPROF_STACKS", v, "a depth from 0 to 64", "0 (no stacks)");
    }
  }
  if (const char* v = get("NRTPROF_MODE"); v != nullptr && v[0] != '\0') {
    if (strcmp(v, "lossless") == 0) {
      config->requested_mode = ShimMode::kLossless;
    } else if (strcmp(v, "best_effort") != 0) {
      Report(report, "NRTPROF_MODE", v, "best_effort or lossless", "best_effort");
    }
  }
  if (const char* v = get("NRTPROF_RING_EVENTS"); v != nullptr && v[0] != '\0') {
    uint64_t n = 0;
    if (ParseUnsigned(v, kMaxRingEvents, &n) && n >= kMinRingEvents) {
      config->ring_events = RoundUpToPowerOfTwo(static_cast<uint32_t>(n));
    } else {
      snprintf(fallback, sizeof(fallback), "%u", config->ring_events);
      Report(report, "NRTPROF_RING_EVENTS", v, "a count from 64 to 4194304", fallback);
    }
  }
  if (const char* v = get("NRTPROF_CLOCK"); v != nullptr && v[0] != '\0') {
    if (strcmp(v, "auto") == 0) {
      config->clock = ClockChoice::kAuto;
    } else if (strcmp(v, "tsc") == 0) {
      config->clock = ClockChoice::kTsc;
    } else if (strcmp(v, "monotonic") == 0) {
      config->clock = ClockChoice::kMonotonic;
    } else {
      Report(report, "NRTPROF_CLOCK", v, "auto, tsc or monotonic", "auto");
    }
  }
  milliseconds("NRTPROF_FLUSH_TIMEOUT_MS", 0, kMaxFlushTimeoutMs, &config->flush_timeout_ms);
  milliseconds("NRTPROF_RECORDER_BATCH_MS", 1, kMaxRecorderBatchMs, &config->recorder_batch_ms);
  milliseconds("NRTPROF_BATCH_MS", 1, kMaxRecorderBatchMs, &config->batch_ms);
  if (const char* v = get("NRTPROF_SPOOL_DIR"); v != nullptr) {
    if (v[0] != '\0' && (v[0] != '/' || !CopyString(v, config->spool_dir, sizeof(config->spool_dir)))) {
      Report(report, "NRTPROF_SPOOL_DIR", v, "an absolute path under 512 bytes",
             "the default spool folder");
      config->spool_dir[0] = '\0';
    }
  }
  if (const char* v = get("NRTPROF_SPOOL_MAX_BYTES"); v != nullptr && v[0] != '\0') {
    uint64_t bytes = 0;
    if (ParseUnsigned(v, kMaxSpoolBytes, &bytes) && bytes >= kMinSpoolBytes) {
      config->spool_max_bytes = bytes;
    } else {
      snprintf(fallback, sizeof(fallback), "%llu",
               static_cast<unsigned long long>(config->spool_max_bytes));
      Report(report, "NRTPROF_SPOOL_MAX_BYTES", v, "bytes from 65536 to 2^40", fallback);
    }
  }
  if (const char* v = get("NRTPROF_MAX_MODEL_BYTES"); v != nullptr && v[0] != '\0') {
    uint64_t bytes = 0;
    if (ParseUnsigned(v, kMaxModelBytesLimit, &bytes)) {
      config->max_model_bytes = bytes;
    } else {
      snprintf(fallback, sizeof(fallback), "%llu",
               static_cast<unsigned long long>(config->max_model_bytes));
      Report(report, "NRTPROF_MAX_MODEL_BYTES", v, "bytes from 0 to 1073741824", fallback);
    }
  }
}

}  // namespace nrtprof::shim
