// A collective communicator between the ranks of a job: processes on one host or on several,
// each running the simulated runtime (nrt_cc_global_comm_init, nrta_cc_*). Internal to libnrt.
//
// Joining: the root rank (0) listens on TCP at NEURON_RT_ROOT_COMM_ID (`host:port`); every
// other rank connects to it: one control connection and one data connection per channel (the
// collectives queues, and models' collectives), each opened with a handshake the root checks
// (magic, version, group size, rank, connection number, host). When every rank is on one host
// (and TCP is not forced) the ranks exchange data through one shared-memory segment the root
// creates (shm_open, O_EXCL, mode 0600, a random name, unlinked once all ranks hold it; a rank
// checks it belongs to its own uid and nobody else may open it); otherwise through the root
// over TCP (a star).
//
// A collective on queue q is the q-th channel's next operation (channel 3: models' collectives): every rank contributes its
// input with the device time it became ready, and gets its output and the group's start time
// (the latest rank's ready time) — so the k-th collective of one queue pairs up across ranks.
// Results are computed in rank order (float32 accumulation, bf16 rounded once), so every rank
// holds the same bits. Any failure — a timeout, a rank gone, two ranks disagreeing on the
// collective — breaks the communicator: that collective and every later one fail.
//
// Thread-safe: one thread at a time per channel (a queue's worker); Abort() from any thread.
#ifndef NRTPROF_SIM_CC_COMM_H_
#define NRTPROF_SIM_CC_COMM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace nrtsim {

// Channels: the collectives XU's three queues (nrta_cc_schedule), and one for the collective
// ops inside models (executions on the communicator's core, one at a time).
inline constexpr int kCcChannels = 4;
inline constexpr int kModelCcChannel = 3;
inline constexpr uint32_t kMaxCcRanks = 1024;

// nrt_cc_op_type_t, nrt_op_type_t and nrt_dtype_t values (nrt/nrt.h).
struct CcOp {
  uint32_t cc_op = 1;     // NRT_CC_ALLGATHER 0, NRT_CC_ALLREDUCE 1, NRT_CC_REDUCESCATTER 2
  uint32_t reduce = 0;    // NRT_OP_ADD 0, NRT_OP_MAX 2, NRT_OP_MIN 3
  uint32_t dtype = 0xA;   // NRT_DTYPE_FLOAT32 0xA, NRT_DTYPE_BFLOAT16 0x6
  uint64_t in_bytes = 0;  // this rank's input
  uint64_t out_bytes = 0;
};
const char* CcOpName(uint32_t cc_op);        // "all_reduce", ...
const char* CcReduceName(uint32_t reduce);   // "add", "max", "min"
const char* CcDtypeName(uint32_t dtype);     // "float32", "bfloat16"

// The output of `rank` for the part [offset, offset + len) of every rank's input, each rank's
// part at inputs[j] (its bytes offset..offset+len). Writes only what that part determines.
void CcCompute(const CcOp& op, uint32_t n, const std::vector<const uint8_t*>& inputs,
               uint64_t offset, uint64_t len, uint32_t rank, uint8_t* out);

struct CcJoinOptions {
  std::string root_comm_id;  // NEURON_RT_ROOT_COMM_ID, "host:port"
  uint32_t rank = 0;
  uint32_t size = 1;
  std::string host_id;       // NRT_SIM_HOST_ID, or the host name
  bool force_tcp = false;    // NRT_SIM_CC_TRANSPORT=tcp
  uint64_t timeout_ms = 30000;
};

// NRT_SIM_CC_TIMEOUT_MS, NRT_SIM_CC_TRANSPORT, NRT_SIM_HOST_ID and NEURON_RT_ROOT_COMM_ID over
// `options`; a malformed value is an InvalidArgument naming the variable.
absl::Status CcOptionsFromEnvironment(CcJoinOptions* options);

class CcComm {
 public:
  // Joins the group: blocks until every rank has joined, or fails (after the timeout at most).
  static absl::StatusOr<std::unique_ptr<CcComm>> Join(const CcJoinOptions& options);
  ~CcComm();
  CcComm(const CcComm&) = delete;
  CcComm& operator=(const CcComm&) = delete;

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }
  bool cross_host() const { return hosts_ > 1; }
  uint32_t hosts() const { return hosts_; }
  const char* transport() const { return shm_ != nullptr ? "shm" : size_ > 1 ? "tcp" : "none"; }

  // One collective on `channel`: contributes `in` (op.in_bytes), writes `out` (op.out_bytes).
  // `ready_ns` (CLOCK_REALTIME) is when this rank's device was ready; *start_ns receives the
  // group's start, the latest rank's. DeadlineExceeded when the group did not gather within
  // the timeout; another error when the communicator is broken.
  absl::Status Run(int channel, const CcOp& op, const uint8_t* in, uint8_t* out,
                   uint64_t ready_ns, uint64_t* start_ns);

  // Fails every Run in progress and to come, at once; tells the other ranks this one left.
  void Abort();

 private:
  struct Shm;
  CcComm() = default;
  absl::Status Broken(absl::Status status);
  absl::Status RunShm(int channel, const CcOp& op, const uint8_t* in, uint8_t* out,
                      uint64_t ready_ns, uint64_t* start_ns);
  absl::Status RunTcp(int channel, const CcOp& op, const uint8_t* in, uint8_t* out,
                      uint64_t ready_ns, uint64_t* start_ns);
  // Waits until every rank's phase on `channel` reaches `phase`.
  absl::Status ShmWait(int channel, uint64_t phase, uint64_t deadline_ms);

  uint32_t rank_ = 0;
  uint32_t size_ = 1;
  uint32_t hosts_ = 1;
  uint64_t timeout_ms_ = 30000;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> broken_{false};
  // TCP: the root holds one data socket per rank and channel ([channel][rank], -1 for itself),
  // other ranks one per channel ([channel][0]); control sockets alike.
  std::vector<int> control_;
  std::vector<int> data_[kCcChannels];
  uint64_t seq_[kCcChannels] = {};
  Shm* shm_ = nullptr;
};

}  // namespace nrtsim

#endif  // NRTPROF_SIM_CC_COMM_H_
