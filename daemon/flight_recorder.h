// The flight recorder: the batches every connected process sent lately, kept as they came off
// the wire (serialized, not decoded), so that a capture can be taken of the seconds *before*
// it was asked for (`nrtprof capture --last 30s`). Bounded by age and by bytes, whichever is hit
// first: the oldest batch goes first, and what goes is counted.
//
// It knows streams only by the core's ids; the core keeps what decoding a stream's batches
// needs (its interned strings, models and clock points) while the recorder holds any of them,
// and forgets a closed stream once its last batch is gone (`emptied`).
//
// Thread-safe.
#ifndef NRTPROF_DAEMON_FLIGHT_RECORDER_H_
#define NRTPROF_DAEMON_FLIGHT_RECORDER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace nrtprof::daemon {

class FlightRecorder {
 public:
  struct Limits {
    uint64_t max_age_ns = 30'000'000'000;  // --flight_recorder_seconds
    uint64_t max_bytes = 256ull << 20;     // --flight_recorder_bytes
  };
  // One batch as it came (a serialized ShimMessage holding the EventBatch), compressed.
  struct Chunk {
    uint64_t stream = 0;
    uint64_t arrival_ns = 0;  // CLOCK_MONOTONIC
    uint64_t sequence = 0;
    uint32_t events = 0;
    std::string bytes;     // compressed (Add), or as it came until then
    uint32_t raw_size = 0;  // the bytes as they came
  };
  // Which compression Add uses (the benchmark compares them).
  enum class Codec { kNone, kLz4, kZstd };
  struct Stats {
    uint64_t bytes = 0;   // held: the chunks' bytes
    uint64_t chunks = 0;
    uint64_t events = 0;
    uint64_t oldest_ns = 0;  // arrival of the oldest chunk held; 0 if none
    uint64_t evicted_chunks = 0;
    uint64_t evicted_events = 0;
    // Arrival of the newest chunk evicted (0 if none): a window that begins after it lost
    // nothing, however short the recorder's reach is now.
    uint64_t newest_evicted_ns = 0;
  };

  explicit FlightRecorder(Limits limits, Codec codec = Codec::kLz4)
      : limits_(limits), codec_(codec) {}
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  const Limits& limits() const { return limits_; }

  // Compresses `chunk`, keeps it (its arrival_ns no earlier than the last one's) and evicts what
  // is over the bounds by then. Streams whose last chunk was evicted are appended to *emptied.
  void Add(Chunk chunk, std::vector<uint64_t>* emptied);
  // Evicts what is older than the age bound at `now_ns`.
  void Expire(uint64_t now_ns, std::vector<uint64_t>* emptied);
  // Every chunk that arrived at or after `since_ns` (and before `until_ns`), by stream, each
  // stream's in order.
  std::map<uint64_t, std::vector<std::shared_ptr<const Chunk>>> Since(
      uint64_t since_ns, uint64_t until_ns = UINT64_MAX) const;
  // A chunk's bytes as they came; false if they do not decompress (a defect: counted by the
  // caller as a batch that does not decode).
  static bool Bytes(const Chunk& chunk, std::string* out);
  // Whether any chunk of `stream` is held.
  bool Holds(uint64_t stream) const;
  Stats stats() const;

 private:
  void EvictFrontLocked(std::vector<uint64_t>* emptied) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  const Codec codec_;
  mutable std::mutex mu_;
  std::deque<std::shared_ptr<const Chunk>> chunks_ ABSL_GUARDED_BY(mu_);  // in arrival order
  std::map<uint64_t, uint64_t> chunks_of_stream_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_FLIGHT_RECORDER_H_
