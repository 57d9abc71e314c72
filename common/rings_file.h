// The rings file: the memory a profiled process records into, shared with the daemon on its
// machine so that a process that dies abruptly (SIGKILL, _exit, a crash) can still be
// accounted for. One anonymous memory file (memfd "nrtprof-rings") per process: a header page,
// then one slot per recording thread holding that thread's ring (shim/preload/event_ring.h). The shim
// names the file's descriptor in its Hello; a daemon on the same machine opens it through
// /proc/PID/fd and, when the process ends without its final batch, reads how many records
// the process had made, so that those it never sent are counted (process_died) instead of
// missing. docs/trace_format.md, "The rings file", has the layout.
//
// Written by the shim (the header at creation and at thread exits; the rings by their
// threads), read by the daemon: plain data at fixed offsets, little-endian, 64-bit counters.
#ifndef NRTPROF_COMMON_RINGS_FILE_H_
#define NRTPROF_COMMON_RINGS_FILE_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

namespace nrtprof {

inline constexpr char kRingsFileName[] = "nrtprof-rings";  // memfd name (/proc: "/memfd:...")
inline constexpr char kRingsFileMagic[8] = {'N', 'R', 'T', 'P', 'R', 'O', 'F', 'R'};
inline constexpr uint32_t kRingsFileVersion = 1;
inline constexpr uint32_t kRingsFileHeaderBytes = 4096;

// Record kinds as the counters index them (shim/preload/record.h's RecordKind): 1 a libnrt call
// (runtime lane), 2 an annotation range (framework lane); 0 unused.
inline constexpr int kRingsKindCall = 1;
inline constexpr int kRingsKindRange = 2;
inline constexpr int kRingsKinds = 3;

struct RingsFileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // where ring 0 begins
  uint64_t ring_stride;   // bytes from one ring's start to the next's (whole pages)
  // Rings handed out so far (slots 0 .. rings_made-1; a slot is never handed out twice).
  std::atomic<uint32_t> rings_made;
  uint32_t reserved;
  // Rings of threads that have exited, whose memory the shim released (their slots read as
  // zeros afterwards): what their counters said, by kind.
  std::atomic<uint64_t> retired_committed[kRingsKinds];
  std::atomic<uint64_t> retired_dropped[kRingsKinds];
  // Records lost outside any ring (a thread past its exit, no memory for a ring), by kind.
  std::atomic<uint64_t> lost[kRingsKinds];
};

// A ring's counters, at this offset from the ring's start (shim/preload/event_ring.h checks it).
inline constexpr size_t kRingCountersOffset = 64;
struct RingCounters {
  uint64_t head;                   // slots ever written
  uint64_t cached_tail;
  uint64_t dropped[kRingsKinds];   // records refused: the ring was full
  uint64_t committed[kRingsKinds]; // records written, by kind
};

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_RINGS_FILE_H_
