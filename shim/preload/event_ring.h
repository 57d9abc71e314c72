// A fixed-size single-producer single-consumer ring of 64-byte slots: one per application
// thread, written by that thread's interposed calls and drained by the flusher thread. A record
// takes one slot, plus the slots its call stack and name need (record.h); a record that would
// not fit before the end of the ring is preceded by a pad record that fills the rest.
//
// The producer never blocks, locks, allocates or makes a system call: a full ring refuses the
// record and the producer counts it as dropped, by kind (DropCounters.ring_full, and by_lane).
//
// The producer writes through a RingProducer (below), which keeps its side of the ring (where
// it writes next, the tail it last saw) outside the ring's memory.
//
// Thread-safety: a ring's RingProducer and CountDrop from the one producer thread only; Drain
// and populated_slots/set_populated_slots from the one consumer thread only; dropped() and
// written_slots() from anywhere. Memory comes from the caller (Create) so the shim's core can
// allocate it without the C++ runtime; the ring has no destructor to run.
#ifndef NRTPROF_SHIM_PRELOAD_EVENT_RING_H_
#define NRTPROF_SHIM_PRELOAD_EVENT_RING_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <new>

#include "common/rings_file.h"
#include "shim/preload/record.h"

namespace nrtprof::shim {

// Calls fn(const Record&) for each record of `n` slots in a row (a piece of a ring, or the
// slots copied out of one: EventRing::CopyOut), oldest first, pads skipped. Returns how many
// records.
template <typename Fn>
size_t ForEachRecord(const Record* slots, size_t n, Fn&& fn) {
  size_t records = 0;
  for (size_t i = 0; i < n;) {
    const Record& r = slots[i];
    if (r.kind != RecordKind::kPad) {
      fn(r);
      ++records;
    }
    i += r.slots == 0 ? 1 : r.slots;  // never stalls on a bad record
  }
  return records;
}

class EventRing {
 public:
  static constexpr size_t kAlign = 64;

  static size_t BytesFor(uint32_t capacity_slots) {
    return sizeof(EventRing) + static_cast<size_t>(capacity_slots) * kRecordSlotBytes;
  }
  // Builds a ring in `memory`: BytesFor() bytes aligned to kAlign. `capacity_slots` must be a
  // power of two, at least 2 * kMaxRecordSlots.
  static EventRing* Create(void* memory, uint32_t capacity_slots) {
    return new (memory) EventRing(capacity_slots);
  }

  EventRing(const EventRing&) = delete;
  EventRing& operator=(const EventRing&) = delete;

  uint32_t capacity() const { return capacity_; }

  // Producer: one record of `kind` (kApiCall or kRange) could not be stored.
  void CountDrop(RecordKind kind) {
    dropped_[static_cast<size_t>(kind) % kDropKinds].fetch_add(1, std::memory_order_relaxed);
  }

  // Records dropped, of one kind or all.
  uint64_t dropped(RecordKind kind) const {
    return dropped_[static_cast<size_t>(kind) % kDropKinds].load(std::memory_order_relaxed);
  }
  uint64_t dropped() const { return dropped(RecordKind::kApiCall) + dropped(RecordKind::kRange); }
  // Records committed, of one kind.
  uint64_t committed(RecordKind kind) const {
    return committed_[static_cast<size_t>(kind) % kDropKinds].load(std::memory_order_relaxed);
  }
  // Slots ever committed (pads included): how far the producer has come.
  uint64_t written_slots() const { return head_.load(std::memory_order_acquire); }

  // Consumer: calls fn(const Record&) for each committed record, oldest first, then frees
  // their slots. Returns how many records.
  template <typename Fn>
  size_t Drain(Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    // A record never wraps: the slots before the ring's end, then those from its start.
    const uint64_t before_end = BeforeEnd(tail, head - tail);
    size_t n = ForEachRecord(Slot(tail), before_end, fn);
    n += ForEachRecord(Slot(0), head - tail - before_end, fn);
    tail_.store(head, std::memory_order_release);
    return n;
  }

  // Consumer: the slots written and not yet drained.
  uint64_t unread_slots() const {
    return head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_relaxed);
  }
  // Consumer: copies the committed slots as they are (pads included, oldest first) to `out`,
  // which has room for `room` slots, and frees them; nothing if they do not fit. Returns the
  // slots copied. ForEachRecord walks the copy as Drain walks the ring: a record never wraps,
  // so the slots of the two pieces before and after the ring's end follow on.
  size_t CopyOut(Record* out, size_t room) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    const uint64_t n = head - tail;
    if (n == 0 || n > room) return 0;
    const uint64_t before_end = BeforeEnd(tail, n);
    memcpy(out, Slot(tail), before_end * kRecordSlotBytes);
    memcpy(out + before_end, Slot(0), (n - before_end) * kRecordSlotBytes);
    tail_.store(head, std::memory_order_release);
    return n;
  }

  // Consumer: how many slots from the ring's start are known to be backed by memory (the
  // flusher faults pages in ahead of the producer, so the hot path rarely touches a new page).
  uint64_t populated_slots() const { return populated_slots_; }
  void set_populated_slots(uint64_t slots) { populated_slots_ = slots; }
  // Consumer: written_slots() as of the consumer's previous look, for its own pacing.
  uint64_t seen_written_slots() const { return seen_written_slots_; }
  void set_seen_written_slots(uint64_t slots) { seen_written_slots_ = slots; }
  // The first slot's address, for the consumer's page work.
  char* slot_memory() { return reinterpret_cast<char*>(this) + sizeof(EventRing); }

  // Consumer, with no producer (the ring's thread has ended and the ring was drained): empties
  // the ring and zeroes its counters for the next thread that takes it; its pages stay.
  void Reset() {
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    for (size_t k = 0; k < kDropKinds; ++k) {
      dropped_[k].store(0, std::memory_order_relaxed);
      committed_[k].store(0, std::memory_order_relaxed);
    }
    seen_written_slots_ = 0;
  }

 private:
  explicit EventRing(uint32_t capacity) : capacity_(capacity) {}

  // Of `n` slots from `index`, how many come before the ring's end.
  uint64_t BeforeEnd(uint64_t index, uint64_t n) const {
    const uint64_t left = capacity_ - (index & (capacity_ - 1));
    return n < left ? n : left;
  }
  Record* Slot(uint64_t index) {
    return reinterpret_cast<Record*>(slot_memory() + (index & (capacity_ - 1)) * kRecordSlotBytes);
  }

  const uint32_t capacity_;
  // Producer's side, written by its RingProducer.
  alignas(kAlign) std::atomic<uint64_t> head_{0};  // next slot to write
  uint64_t unused_ = 0;  // (the rings file's cached_tail: the producer keeps its own)
  static constexpr size_t kDropKinds = 3;  // by RecordKind; kPad's is never used
  std::atomic<uint64_t> dropped_[kDropKinds] = {};
  std::atomic<uint64_t> committed_[kDropKinds] = {};
  // Consumer's side.
  alignas(kAlign) std::atomic<uint64_t> tail_{0};  // next slot to read
  uint64_t populated_slots_ = 0;
  uint64_t seen_written_slots_ = 0;
  // The slots follow the object; sizeof(EventRing) is a multiple of kAlign.

  friend class RingProducer;
  friend struct EventRingLayout;
};

// The producer's side of one ring: where it writes next, the tail it last saw, how many records
// of each kind it committed. The shim keeps it in the producing thread's thread-local storage,
// so that the hot path reads nothing of the ring: it writes the slots. A call after a wait for
// the device finds the ring's lines out of the core's caches; the thread's state and then the
// ring's counters, each read through the one before, were misses one after another. After an
// 80 us sleep, a recorded call costs 0.12 us less this way (bench/README.md, "A call after a wait"). The ring's own
// counters are only stored to, for the consumer and for a reader of the rings file.
class RingProducer {
 public:
  constexpr RingProducer() = default;
  // Takes up where the ring's head and tail are. The ring has no other producer.
  explicit RingProducer(EventRing* ring)
      : ring_(ring),
        head_(ring->head_.load(std::memory_order_relaxed)),
        cached_tail_(ring->tail_.load(std::memory_order_acquire)),
        mask_(ring->capacity_ - 1),
        until_wake_(EighthRing()) {
    committed_[0] = ring->committed(RecordKind::kApiCall);
    committed_[1] = ring->committed(RecordKind::kRange);
  }

  // The ring written, or null for none.
  EventRing* ring() const { return ring_; }

  // A record with room for `slots` slots (1 to kMaxRecordSlots), or nullptr if the ring is
  // full. The record is the caller's until Commit(); at most one is reserved at a time.
  Record* TryReserve(uint32_t slots) {
    const uint32_t capacity = mask_ + 1;
    const uint32_t offset = static_cast<uint32_t>(head_ & mask_);
    // A record never wraps: the slots left before the end are padded over.
    const uint32_t pad = capacity - offset < slots ? capacity - offset : 0;
    if (head_ + pad + slots - cached_tail_ > capacity) {
      cached_tail_ = ring_->tail_.load(std::memory_order_acquire);
      if (head_ + pad + slots - cached_tail_ > capacity) return nullptr;
    }
    if (pad != 0) {
      Record* p = Slot(head_);
      p->kind = RecordKind::kPad;
      p->slots = static_cast<uint8_t>(pad);
      head_ += pad;
      ring_->head_.store(head_, std::memory_order_release);
    }
    return Slot(head_);
  }
  // Publishes the reserved record, which takes record->slots slots (no more than were
  // reserved). True when the ring is three quarters full or more, looked at once every eighth
  // of a ring's worth of records: the caller then wakes the consumer (core.h's WakeFlusher), so that
  // a ring filled faster than the consumer's period is drained before it overflows. Only a
  // filling ring wakes it: a consumer woken to drain a ring its periodic tick would have
  // drained in time works on the other CPU beside a hot thread (issue 38: a wake every half
  // ring of records made 10,000-call bursts +120 ns a call slower; waking at half full, +28).
  // The quarter left is the consumer's time to wake: 8,192 records of the default ring, 6 ms
  // of PyTorch's fastest ops. The look costs a decrement, and a load of the consumer's tail
  // once an eighth; the wake is the caller's.
  bool Commit(const Record* record) {
    // Counted by kind in the ring, for a reader of its memory after the process died
    // (common/rings_file.h): what it had made, whether drained or not.
    const bool range = record->kind == RecordKind::kRange;  // else a call: pads are not committed
    // The slot by `range`, not `kind % kDropKinds`: the modulo was a multiply on every call.
    static_assert(static_cast<size_t>(RecordKind::kApiCall) < EventRing::kDropKinds &&
                  static_cast<size_t>(RecordKind::kRange) < EventRing::kDropKinds);
    ring_->committed_[range ? static_cast<size_t>(RecordKind::kRange)
                            : static_cast<size_t>(RecordKind::kApiCall)]
        .store(++committed_[range], std::memory_order_relaxed);
    head_ += record->slots;
    ring_->head_.store(head_, std::memory_order_release);
    // The next record's line, fetched for writing while the program works until its next
    // call: a line not in the cache (a new thread's ring, a ring not written for a while)
    // made that record's stores wait, and the runtime's next locked instruction with them.
    __builtin_prefetch(Slot(head_), 1, 3);
    if (--until_wake_ != 0) return false;
    until_wake_ = EighthRing();
    cached_tail_ = ring_->tail_.load(std::memory_order_acquire);
    return head_ - cached_tail_ >= (static_cast<uint64_t>(mask_) + 1) / 4 * 3;
  }
  // One record of `kind` (kApiCall or kRange) could not be stored.
  void CountDrop(RecordKind kind) { ring_->CountDrop(kind); }

 private:
  uint32_t EighthRing() const { return (mask_ + 1) / 8 > 0 ? (mask_ + 1) / 8 : 1; }
  Record* Slot(uint64_t index) const {
    return reinterpret_cast<Record*>(ring_->slot_memory() + (index & mask_) * kRecordSlotBytes);
  }

  // 48 bytes: with the thread's correlation ids, one cache line (shim/preload/core.h).
  EventRing* ring_ = nullptr;
  uint64_t head_ = 0;               // next slot to write
  uint64_t cached_tail_ = 0;        // the ring's tail as last seen
  uint64_t committed_[2] = {0, 0};  // calls, ranges
  uint32_t mask_ = 0;               // capacity - 1
  uint32_t until_wake_ = 0;         // records to commit before Commit() looks at the tail
};

// The producer's counters sit where a reader of the rings file expects them.
struct EventRingLayout {
  static_assert(offsetof(EventRing, head_) == kRingCountersOffset, "rings file layout");
  static_assert(offsetof(EventRing, unused_) ==
                    kRingCountersOffset + offsetof(RingCounters, cached_tail),
                "rings file layout");
  static_assert(offsetof(EventRing, dropped_) ==
                    kRingCountersOffset + offsetof(RingCounters, dropped),
                "rings file layout");
  static_assert(offsetof(EventRing, committed_) ==
                    kRingCountersOffset + offsetof(RingCounters, committed),
                "rings file layout");
  static_assert(offsetof(EventRing, tail_) >= kRingCountersOffset + sizeof(RingCounters),
                "the producer's counters fit its cache line");
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Faults in the ring's memory up to slot `until_slots` (at most its capacity), from where the
// last call stopped, so that the producer finds those pages present and mapped: one madvise()
// call, then one read of each page. The read is what makes the producer's first write cheap
// on a VM whose hypervisor maps a guest page only at its first access from user space (the
// project's VMs: a page populated by madvise() still cost 3.5 us at its first access, 0 guest
// page faults counted; read once by any thread of the process, its first write cost 0.2 us;
// bench/README.md, "Where a new thread's first calls went"). On a kernel without
// MADV_POPULATE_WRITE it gives up for good and pages fault in as written.
// Called by the producer before the ring is shared, then by the consumer only. The pages read
// are ahead of the producer; the reads are atomic, as the producer may reach them meanwhile.
inline void FaultInSlots(EventRing* ring, uint64_t until_slots) {
  if (until_slots > ring->capacity()) until_slots = ring->capacity();
  const uint64_t from = ring->populated_slots();
  if (until_slots <= from) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin =
      reinterpret_cast<uintptr_t>(ring->slot_memory() + from * kRecordSlotBytes) & ~(page - 1);
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(ring->slot_memory() + until_slots * kRecordSlotBytes) + page -
       1) & ~(page - 1);
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) != 0) {
    ring->set_populated_slots(ring->capacity());
    return;
  }
  for (uintptr_t at = begin; at < end; at += page) {
    (void)__atomic_load_n(reinterpret_cast<const char*>(at), __ATOMIC_RELAXED);
  }
  ring->set_populated_slots(until_slots);
}

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_PRELOAD_EVENT_RING_H_
