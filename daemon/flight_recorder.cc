#include "daemon/flight_recorder.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <utility>

namespace nrtprof::daemon {
namespace {

// What a chunk costs besides its bytes: the shared pointer's block, the string, the deque slot.
constexpr uint64_t kChunkOverhead = 96;

uint64_t Cost(const FlightRecorder::Chunk& c) { return c.bytes.size() + kChunkOverhead; }

// The first byte of the stored bytes says how the rest is kept.
constexpr char kRaw = 0, kLz4 = 1, kZstd = 2;

// The most a thread's compression buffer keeps between batches.
constexpr size_t kCompressBufferKept = 4 << 20;

void Compress(FlightRecorder::Codec codec, std::string* bytes) {
  const std::string& in = *bytes;
  // Compressed into a buffer of the thread's, kept from batch to batch: a new one of the bound's
  // size for each batch was zero-filled and faulted in, then copied out at its real size.
  thread_local std::string buffer;
  size_t n = 0;  // compressed bytes in buffer after its first, or 0
  if (codec == FlightRecorder::Codec::kLz4) {
    const size_t bound = 1 + static_cast<size_t>(LZ4_compressBound(static_cast<int>(in.size())));
    if (buffer.size() < bound) buffer.resize(bound);
    const int written = LZ4_compress_default(in.data(), buffer.data() + 1,
                                             static_cast<int>(in.size()),
                                             static_cast<int>(bound - 1));
    if (written > 0) {
      buffer[0] = kLz4;
      n = static_cast<size_t>(written);
    }
  } else if (codec == FlightRecorder::Codec::kZstd) {
    const size_t bound = 1 + ZSTD_compressBound(in.size());
    if (buffer.size() < bound) buffer.resize(bound);
    const size_t written = ZSTD_compress(buffer.data() + 1, bound - 1, in.data(), in.size(), 1);
    if (!ZSTD_isError(written)) {
      buffer[0] = kZstd;
      n = written;
    }
  }
  std::string out;
  if (n != 0 && n < in.size()) {
    out.assign(buffer.data(), 1 + n);
  } else {
    out.reserve(in.size() + 1);
    out.push_back(kRaw);
    out.append(in);
  }
  // What a shim's batch needs is kept (a few hundred KiB); a far larger message's, not.
  if (buffer.size() > kCompressBufferKept) std::string().swap(buffer);
  *bytes = std::move(out);
}

}  // namespace

bool FlightRecorder::Bytes(const Chunk& chunk, std::string* out) {
  const std::string& in = chunk.bytes;
  if (in.empty()) return false;
  out->resize(chunk.raw_size);
  switch (in[0]) {
    case kRaw:
      out->assign(in, 1, std::string::npos);
      return out->size() == chunk.raw_size;
    case kLz4:
      return LZ4_decompress_safe(in.data() + 1, out->data(), static_cast<int>(in.size() - 1),
                                 static_cast<int>(chunk.raw_size)) ==
             static_cast<int>(chunk.raw_size);
    case kZstd: {
      const size_t n = ZSTD_decompress(out->data(), chunk.raw_size, in.data() + 1, in.size() - 1);
      return !ZSTD_isError(n) && n == chunk.raw_size;
    }
    default:
      return false;
  }
}

void FlightRecorder::EvictFrontLocked(std::vector<uint64_t>* emptied) {
  const std::shared_ptr<const Chunk> front = std::move(chunks_.front());
  chunks_.pop_front();
  stats_.bytes -= Cost(*front);
  stats_.chunks -= 1;
  stats_.events -= front->events;
  stats_.evicted_chunks += 1;
  stats_.evicted_events += front->events;
  stats_.newest_evicted_ns = front->arrival_ns;
  auto it = chunks_of_stream_.find(front->stream);
  if (it != chunks_of_stream_.end() && --it->second == 0) {
    chunks_of_stream_.erase(it);
    emptied->push_back(front->stream);
  }
  stats_.oldest_ns = chunks_.empty() ? 0 : chunks_.front()->arrival_ns;
}

void FlightRecorder::Add(Chunk chunk, std::vector<uint64_t>* emptied) {
  chunk.raw_size = static_cast<uint32_t>(chunk.bytes.size());
  Compress(codec_, &chunk.bytes);  // outside the lock: streams compress side by side
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t now_ns = chunk.arrival_ns;
  stats_.bytes += Cost(chunk);
  stats_.chunks += 1;
  stats_.events += chunk.events;
  ++chunks_of_stream_[chunk.stream];
  chunks_.push_back(std::make_shared<const Chunk>(std::move(chunk)));
  if (stats_.oldest_ns == 0) stats_.oldest_ns = chunks_.front()->arrival_ns;
  while (!chunks_.empty() &&
         (stats_.bytes > limits_.max_bytes ||
          chunks_.front()->arrival_ns + limits_.max_age_ns < now_ns)) {
    EvictFrontLocked(emptied);
  }
}

void FlightRecorder::Expire(uint64_t now_ns, std::vector<uint64_t>* emptied) {
  std::lock_guard<std::mutex> lock(mu_);
  while (!chunks_.empty() && chunks_.front()->arrival_ns + limits_.max_age_ns < now_ns) {
    EvictFrontLocked(emptied);
  }
}

std::map<uint64_t, std::vector<std::shared_ptr<const FlightRecorder::Chunk>>> FlightRecorder::Since(
    uint64_t since_ns, uint64_t until_ns) const {
  std::map<uint64_t, std::vector<std::shared_ptr<const Chunk>>> by_stream;
  std::lock_guard<std::mutex> lock(mu_);
  auto first = std::lower_bound(
      chunks_.begin(), chunks_.end(), since_ns,
      [](const std::shared_ptr<const Chunk>& c, uint64_t t) { return c->arrival_ns < t; });
  for (auto it = first; it != chunks_.end() && (*it)->arrival_ns < until_ns; ++it) {
    by_stream[(*it)->stream].push_back(*it);
  }
  return by_stream;
}

bool FlightRecorder::Holds(uint64_t stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  return chunks_of_stream_.count(stream) != 0;
}

FlightRecorder::Stats FlightRecorder::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace nrtprof::daemon
