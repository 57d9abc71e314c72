// The shim's configuration, from NRTPROF_* environment variables (shim/README.md has the
// table). Read once, at the first use of the shim in a process.
//
// A malformed value never breaks the program: ParseConfig reports one line through `report`
// and uses the default. Plain data with fixed-size strings, so the shim's core (which avoids
// the C++ runtime) can hold it; parsing allocates nothing.
#ifndef NRTPROF_SHIM_PRELOAD_CONFIG_H_
#define NRTPROF_SHIM_PRELOAD_CONFIG_H_

#include <stdint.h>

namespace nrtprof::shim {

enum class ShimMode : uint8_t {
  kBestEffort = 0,
  // Every batch is also appended to a spool file (common/spool_file.h) that a daemon on this
  // machine reads when the capture stops, and that every new stream is fed from past what its
  // daemon has. Needs a capture id (NRTPROF_CAPTURE) to name the file.
  kLossless = 1,
};

// NRTPROF_CLOCK: what the hot path timestamps with (tick_clock.h).
enum class ClockChoice : uint8_t {
  kAuto = 0,       // the TSC where it is invariant, else CLOCK_MONOTONIC
  kTsc = 1,        // the TSC, if invariant (else CLOCK_MONOTONIC, said once on stderr)
  kMonotonic = 2,  // clock_gettime(CLOCK_MONOTONIC)
};

struct Config {
  bool disabled = false;          // NRTPROF_DISABLE=1: pass every call straight through
  char addr[512] = {};            // NRTPROF_ADDR; empty: the default socket (common/address.h)
  // NRTPROF_SERVICE_USER: the user (name or uid) of a shared daemon this process may trust
  // besides its own user and root (common/socket_trust.h); the backend resolves it.
  char service_user[256] = {};
  // A TCP NRTPROF_ADDR needs TLS: the CA that signed the daemon's certificate, and a bearer
  // token file or a client certificate and key (mutual TLS). Paths; the backend reads them.
  char tls_ca[512] = {};          // NRTPROF_TLS_CA
  char token_file[512] = {};      // NRTPROF_TOKEN_FILE
  char tls_cert[512] = {};        // NRTPROF_TLS_CERT
  char tls_key[512] = {};         // NRTPROF_TLS_KEY
  char capture_id[256] = {};      // NRTPROF_CAPTURE
  // The process's job, for the daemon's trigger rules "on job" (Hello.job): NRTPROF_JOB (the
  // operator's label) if set, else NEURON_RT_ROOT_COMM_ID (the collective root every rank of a
  // Neuron job is given, HOST:PORT); empty if neither. At most kMaxJobBytes printable ASCII
  // characters: another value is refused (one line) and the job left empty.
  char job[256] = {};
  // The process's rank in its job (Hello.rank), 0 to 2^31-1; -1 if unset: the first set of RANK
  // (torchrun), NEURON_PJRT_PROCESS_INDEX (JAX on Neuron), OMPI_COMM_WORLD_RANK (Open MPI),
  // PMI_RANK (MPICH, Intel MPI) and SLURM_PROCID (srun). A value that is not a rank is refused
  // (one line) and none sent.
  int32_t rank = -1;
  uint32_t stack_depth = 0;       // NRTPROF_STACKS, 0..kMaxStackDepth
  ShimMode requested_mode = ShimMode::kBestEffort;  // NRTPROF_MODE
  // NRTPROF_RING_EVENTS: 64-byte slots per thread's ring (an event takes one, plus one per 64
  // bytes of its stack and name), rounded up to a power of two.
  uint32_t ring_events = 32768;
  ClockChoice clock = ClockChoice::kAuto;         // NRTPROF_CLOCK
  uint32_t flush_timeout_ms = 2000;               // NRTPROF_FLUSH_TIMEOUT_MS
  uint64_t max_model_bytes = 64ull << 20;         // NRTPROF_MAX_MODEL_BYTES
  char spool_dir[512] = {};       // NRTPROF_SPOOL_DIR; empty: DefaultSpoolDir()
  // NRTPROF_DEVICE_PROFILE=1: the runtime's device profile of every loaded model, read into
  // the ops inside each execution (device_profile.h).
  bool device_profile = false;
  // NRTPROF_DEVICE_PROFILE_PERIOD_MS: how often the profiles are read while the program runs;
  // 0: only at nrt_unload, nrt_close and exit.
  uint32_t device_profile_period_ms = 1000;
  uint64_t spool_max_bytes = 1ull << 30;          // NRTPROF_SPOOL_MAX_BYTES
  // NRTPROF_RECORDER_BATCH_MS: with a standing daemon's flight recorder the only one recording
  // (no capture), how long events may wait in the process before they are sent (1 ms to 1 h);
  // a capture's stop asks for them at once whatever this says.
  uint32_t recorder_batch_ms = 500;
  // NRTPROF_BATCH_MS: during a capture, how long events may wait in the process before they
  // are sent (1 ms to 1 h); a capture's stop asks for them at once whatever this says.
  uint32_t batch_ms = 500;
};

inline constexpr uint32_t kMaxJobBytes = 255;
inline constexpr uint32_t kMinRingEvents = 64;
inline constexpr uint32_t kMaxRingEvents = 1u << 22;
inline constexpr uint32_t kMaxFlushTimeoutMs = 600000;
inline constexpr uint32_t kMaxDeviceProfilePeriodMs = 3600000;
inline constexpr uint32_t kMaxRecorderBatchMs = 3600000;
inline constexpr uint64_t kMaxModelBytesLimit = 1ull << 30;
inline constexpr uint64_t kMinSpoolBytes = 1ull << 16;
inline constexpr uint64_t kMaxSpoolBytes = 1ull << 40;

using GetenvFn = const char* (*)(const char* name);
using ReportFn = void (*)(const char* line);

// Fills *config from the variables `get` returns (null: unset). Each malformed value is one
// call to `report` with a line ending in '\n'.
void ParseConfig(GetenvFn get, ReportFn report, Config* config);

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PRELOAD_CONFIG_H_
