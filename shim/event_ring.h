// A fixed-size single-producer single-consumer ring of Records: one per application thread,
// written by that thread's interposed calls and drained by the flusher thread.
//
// The producer never blocks, locks, allocates or makes a system call: a full ring refuses the
// record and the producer counts it as dropped (DropCounters.ring_full). Slots have a fixed
// stride of sizeof(Record) plus room for `stack_capacity` return addresses.
//
// Thread-safety: TryReserve/Commit/CountDrop from the one producer thread only; Drain from the
// one consumer thread only; dropped() from anywhere. Memory comes from the caller (Create) so
// the shim's core can allocate it without the C++ runtime; the ring has no destructor to run.
#ifndef NRTPROF_SHIM_EVENT_RING_H_
#define NRTPROF_SHIM_EVENT_RING_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <new>

#include "shim/record.h"

namespace nrtprof::shim {

class EventRing {
 public:
  static constexpr size_t kAlign = 64;

  // `capacity` must be a power of two.
  static size_t SlotBytes(uint32_t stack_capacity) {
    return sizeof(Record) + stack_capacity * sizeof(uintptr_t);
  }
  static size_t BytesFor(uint32_t capacity, uint32_t stack_capacity) {
    return sizeof(EventRing) + static_cast<size_t>(capacity) * SlotBytes(stack_capacity);
  }
  // Builds a ring in `memory`: BytesFor() bytes aligned to kAlign.
  static EventRing* Create(void* memory, uint32_t capacity, uint32_t stack_capacity) {
    return new (memory) EventRing(capacity, stack_capacity);
  }

  EventRing(const EventRing&) = delete;
  EventRing& operator=(const EventRing&) = delete;

  uint32_t capacity() const { return capacity_; }
  uint32_t stack_capacity() const { return stack_capacity_; }

  // Producer: the next free slot, or nullptr if the ring is full. The slot is the caller's
  // until Commit(); at most one slot is reserved at a time.
  Record* TryReserve() {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - cached_tail_ >= capacity_) {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (head - cached_tail_ >= capacity_) return nullptr;
    }
    return Slot(head);
  }
  // Producer: publishes the reserved slot to the consumer.
  void Commit() { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  // Producer: one record could not be stored.
  void CountDrop() { dropped_.fetch_add(1, std::memory_order_relaxed); }

  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // Consumer: calls fn(const Record&) for each committed record, oldest first, then frees
  // their slots. Returns how many.
  template <typename Fn>
  size_t Drain(Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    for (uint64_t i = tail; i != head; ++i) fn(static_cast<const Record&>(*Slot(i)));
    tail_.store(head, std::memory_order_release);
    return static_cast<size_t>(head - tail);
  }

 private:
  EventRing(uint32_t capacity, uint32_t stack_capacity)
      : capacity_(capacity), stack_capacity_(stack_capacity),
        slot_bytes_(SlotBytes(stack_capacity)) {}

  Record* Slot(uint64_t index) {
    char* base = reinterpret_cast<char*>(this) + sizeof(EventRing);
    return reinterpret_cast<Record*>(base + (index & (capacity_ - 1)) * slot_bytes_);
  }

  const uint32_t capacity_;
  const uint32_t stack_capacity_;
  const size_t slot_bytes_;
  // Producer's side.
  alignas(kAlign) std::atomic<uint64_t> head_{0};  // next slot to write
  uint64_t cached_tail_ = 0;                       // last tail the producer saw
  std::atomic<uint64_t> dropped_{0};
  // Consumer's side.
  alignas(kAlign) std::atomic<uint64_t> tail_{0};  // next slot to read
  // The slots follow the object; sizeof(EventRing) is a multiple of kAlign.
};

}  // namespace nrtprof::shim

#endif  // NRTPROF_SHIM_EVENT_RING_H_
