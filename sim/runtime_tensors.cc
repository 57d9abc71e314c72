// The simulated runtime's tensors: allocation on a NeuronCore's memory or the host, slices
// and attached buffers, reads, writes, copies and memsets with their DMA on the device's clock,
// and tensor sets (runtime.h).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime.h"
#include "runtime_internal.h"

namespace nrtsim {

using internal::Fail;
using internal::RangeOk;

// ---------------------------------------------------------------------------------------------
// Tensors

NRT_STATUS Runtime::ChargeDeviceMemory(int vnc, size_t size) {
  if (vnc < 0) return NRT_SUCCESS;
  size_t& used = device_bytes_used_[vnc];
  if (size > config_.hbm_bytes_per_core - used) {
    return Fail(NRT_RESOURCE, absl::StrCat("nrt_tensor_allocate: ", size,
                                           " bytes do not fit in NeuronCore ", vnc, "'s ",
                                           config_.hbm_bytes_per_core - used, " free bytes"));
  }
  used += size;
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::AllocateTensor(nrt_tensor_placement_t placement, int vnc, size_t size,
                                   const char* name, nrt_tensor_t** tensor) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (tensor == nullptr) return Fail(NRT_INVALID, "nrt_tensor_allocate: null output pointer");
  if (size == 0) return Fail(NRT_INVALID, "nrt_tensor_allocate: size 0");
  if (placement != NRT_TENSOR_PLACEMENT_DEVICE && placement != NRT_TENSOR_PLACEMENT_HOST &&
      placement != NRT_TENSOR_PLACEMENT_VIRTUAL) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_tensor_allocate: unknown placement ",
                                          static_cast<int>(placement)));
  }
  const bool device = placement == NRT_TENSOR_PLACEMENT_DEVICE;
  if (device && (vnc < 0 || vnc >= static_cast<int>(config_.num_cores))) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_tensor_allocate: NeuronCore ", vnc,
                                          " does not exist (", config_.num_cores, " visible)"));
  }
  {
    // Charged before the bytes exist, so an impossible request never touches host memory.
    std::lock_guard<std::mutex> lock(mu_);
    if (NRT_STATUS s = ChargeDeviceMemory(device ? vnc : -1, size); s != NRT_SUCCESS) return s;
  }
  auto storage = std::make_shared<Storage>();
  storage->owned.reset(new (std::nothrow) uint8_t[size]());
  if (storage->owned == nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device) device_bytes_used_[vnc] -= size;
    return Fail(NRT_RESOURCE, absl::StrCat("nrt_tensor_allocate: out of memory for ", size,
                                           " bytes"));
  }
  storage->data = storage->owned.get();
  storage->size = size;
  storage->vnc = device ? vnc : -1;
  auto t = std::make_unique<nrt_tensor>();
  t->name = name != nullptr ? name : "";
  t->placement = placement;
  t->storage = std::move(storage);
  t->size = size;
  std::lock_guard<std::mutex> lock(mu_);
  *tensor = t.get();
  tensors_[t.get()] = std::move(t);
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::AllocateEmpty(const char* name, nrt_tensor_t** tensor) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (tensor == nullptr) return Fail(NRT_INVALID, "nrt_tensor_allocate_empty: null output");
  auto t = std::make_unique<nrt_tensor>();
  t->name = name != nullptr ? name : "";
  std::lock_guard<std::mutex> lock(mu_);
  *tensor = t.get();
  tensors_[t.get()] = std::move(t);
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::AllocateSlice(const nrt_tensor_t* source, size_t offset, size_t size,
                                  const char* name, nrt_tensor_t** slice) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (slice == nullptr) return Fail(NRT_INVALID, "nrt_tensor_allocate_slice: null output");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(source);
  if (it == tensors_.end() || it->second->storage == nullptr) {
    return Fail(NRT_INVALID_HANDLE, "nrt_tensor_allocate_slice: source is not a live tensor");
  }
  const nrt_tensor& src = *it->second;
  if (size == 0 || !RangeOk(offset, size, src.size)) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_tensor_allocate_slice: [", offset, ", +", size,
                                          ") is outside the source's ", src.size, " bytes"));
  }
  auto t = std::make_unique<nrt_tensor>();
  t->name = name != nullptr ? name : src.name;
  t->placement = src.placement;
  t->storage = src.storage;
  t->offset = src.offset + offset;
  t->size = size;
  *slice = t.get();
  tensors_[t.get()] = std::move(t);
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::AttachBuffer(nrt_tensor_t* tensor, void* buffer, size_t size) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (buffer == nullptr || size == 0) {
    return Fail(NRT_INVALID, "nrt_tensor_attach_buffer: null buffer or size 0");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(tensor);
  if (it == tensors_.end()) return Fail(NRT_INVALID_HANDLE, "nrt_tensor_attach_buffer: bad tensor");
  nrt_tensor& t = *it->second;
  if (t.storage != nullptr && t.storage->vnc >= 0 && t.storage.use_count() == 1) {
    device_bytes_used_[t.storage->vnc] -= t.storage->size;
  }
  auto storage = std::make_shared<Storage>();
  storage->data = static_cast<uint8_t*>(buffer);
  storage->size = size;
  t.storage = std::move(storage);
  t.placement = NRT_TENSOR_PLACEMENT_HOST;
  t.offset = 0;
  t.size = size;
  return NRT_SUCCESS;
}

void Runtime::FreeTensor(nrt_tensor_t** tensor) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (tensor == nullptr || *tensor == nullptr || Ready() != NRT_SUCCESS) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(*tensor);
  if (it == tensors_.end()) {
    ReportError("nrt_tensor_free: not a live tensor (freed twice?)");
    return;
  }
  const std::shared_ptr<Storage>& s = it->second->storage;
  // Device memory returns to the pool when the last tensor viewing it goes.
  if (s != nullptr && s->vnc >= 0 && s.use_count() == 1) device_bytes_used_[s->vnc] -= s->size;
  tensors_.erase(it);
  *tensor = nullptr;
}

NRT_STATUS Runtime::ResolveTensor(const nrt_tensor_t* tensor, size_t offset, size_t size,
                                  const char* fn, Region* region) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(tensor);
  if (it == tensors_.end()) return Fail(NRT_INVALID_HANDLE, absl::StrCat(fn, ": not a live tensor"));
  const nrt_tensor& t = *it->second;
  if (t.storage == nullptr) {
    return Fail(NRT_INVALID, absl::StrCat(fn, ": tensor '", t.name, "' has no storage attached"));
  }
  if (!RangeOk(offset, size, t.size)) {
    return Fail(NRT_INVALID, absl::StrCat(fn, ": offset ", offset, " + size ", size,
                                          " is past the end of tensor '", t.name, "' (",
                                          t.size, " bytes)"));
  }
  *region = {t.storage, t.offset + offset, size, t.name};
  return NRT_SUCCESS;
}

uint64_t Runtime::DeviceTransfer(int vnc, const Slot& slot, uint64_t duration_ns,
                                 uint64_t bytes, const TransferTrace& trace,
                                 const std::function<void()>& move) {
  auto done = [&] {
    if (slot.complete != nullptr) (*slot.complete)(NRT_SUCCESS);
  };
  const uint64_t start = OnCore(vnc, slot, duration_ns, [&](uint64_t start) {
    move();
    if (!trace_->Recording()) return;
    // The call's span and the copy inside it both cover the transfer: in the simulator the
    // host waits for the DMA and does nothing else.
    const uint64_t begin = trace_->HostTimeOfDevice(start);
    const uint64_t end = trace_->HostTimeOfDevice(start + duration_ns);
    TraceEvent call;
    call.type = trace.to_device ? TraceEventType::kTensorWrite : TraceEventType::kTensorRead;
    call.nc_idx = static_cast<uint32_t>(vnc);
    call.thread_id = slot.tid;
    call.has_nrta_seq_id = slot.async;
    call.nrta_seq_id = slot.seq;
    call.tensor_id = trace.tensor_id;
    call.size = bytes;
    TraceEvent copy = call;
    copy.type = trace.to_device ? TraceEventType::kDmemBufCopyin : TraceEventType::kDmemBufCopyout;
    copy.mem_handle = trace.tensor_id;
    copy.offset = trace.offset;
    for (TracePhase phase : {TracePhase::kStart, TracePhase::kStop}) {
      const uint64_t at = phase == TracePhase::kStart ? begin : end;
      call.phase = copy.phase = phase;
      call.host_timestamp_ns = copy.host_timestamp_ns = at;
      if (phase == TracePhase::kStart && trace.tensor_call) trace_->Record(call);
      trace_->Record(copy);
      if (phase == TracePhase::kStop && trace.tensor_call) trace_->Record(call);
    }
  }, done);
  return start + duration_ns;
}

NRT_STATUS Runtime::ReadTensor(const nrt_tensor_t* tensor, void* buf, size_t offset,
                               size_t size) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (buf == nullptr && size != 0) return Fail(NRT_INVALID, "nrt_tensor_read: null buffer");
  Region r;
  if (NRT_STATUS s = ResolveTensor(tensor, offset, size, "nrt_tensor_read", &r); s != NRT_SUCCESS) {
    return s;
  }
  auto move = [&] { memcpy(buf, r.data(), size); };
  if (r.vnc() < 0 || size == 0) {
    move();
  } else {
    DeviceTransfer(r.vnc(), SyncSlot(kTransferLane), HostDmaNs(size, config_), size,
                   ReadTrace(r), move);
  }
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::WriteTensor(nrt_tensor_t* tensor, const void* buf, size_t offset,
                                size_t size) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (buf == nullptr && size != 0) return Fail(NRT_INVALID, "nrt_tensor_write: null buffer");
  Region r;
  if (NRT_STATUS s = ResolveTensor(tensor, offset, size, "nrt_tensor_write", &r);
      s != NRT_SUCCESS) {
    return s;
  }
  auto move = [&] { memcpy(r.data(), buf, size); };
  if (r.vnc() < 0 || size == 0) {
    move();
  } else {
    DeviceTransfer(r.vnc(), SyncSlot(kTransferLane), HostDmaNs(size, config_), size,
                   WriteTrace(r), move);
  }
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::CopyTensor(const nrt_tensor_t* src, size_t src_offset, nrt_tensor_t* dst,
                               size_t dst_offset, size_t size) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  Region from, to;
  if (NRT_STATUS s = ResolveTensor(src, src_offset, size, "nrt_tensor_copy", &from);
      s != NRT_SUCCESS) {
    return s;
  }
  if (NRT_STATUS s = ResolveTensor(dst, dst_offset, size, "nrt_tensor_copy", &to);
      s != NRT_SUCCESS) {
    return s;
  }
  if (from.vnc() >= 0 && to.vnc() >= 0 && from.vnc() != to.vnc()) {
    return Fail(NRT_INVALID, absl::StrCat("nrt_tensor_copy: device tensors on NeuronCores ",
                                          from.vnc(), " and ", to.vnc(),
                                          " (a copy must stay on one core)"));
  }
  auto move = [&] { memmove(to.data(), from.data(), size); };
  if ((from.vnc() < 0 && to.vnc() < 0) || size == 0) {
    move();
  } else if (from.vnc() >= 0 && to.vnc() >= 0) {
    // A copy within device memory is no system-trace event in the real runtime: timed, not
    // recorded.
    cores_[to.vnc()]->Run(kTransferLane, DeviceCopyNs(size, config_), [&](uint64_t) { move(); });
  } else {
    const int vnc = std::max(from.vnc(), to.vnc());
    DeviceTransfer(vnc, SyncSlot(kTransferLane), HostDmaNs(size, config_), size,
                   to.vnc() >= 0 ? WriteTrace(to) : ReadTrace(from), move);
  }
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::MemsetTensor(nrt_tensor_t* tensor, uint64_t offset, int value,
                                 size_t size) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  Region r;
  if (NRT_STATUS s = ResolveTensor(tensor, offset, size, "nrt_tensor_memset", &r);
      s != NRT_SUCCESS) {
    return s;
  }
  auto move = [&] { memset(r.data(), value, size); };
  if (r.vnc() < 0 || size == 0) {
    move();
  } else {
    // No system-trace event type stands for a memset: timed, not recorded.
    cores_[r.vnc()]->Run(kTransferLane, HostDmaNs(size, config_), [&](uint64_t) { move(); });
  }
  return NRT_SUCCESS;
}

size_t Runtime::TensorSize(const nrt_tensor_t* tensor) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (Ready() != NRT_SUCCESS) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(tensor);
  return it == tensors_.end() ? 0 : it->second->size;
}

void* Runtime::TensorVa(const nrt_tensor_t* tensor) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (Ready() != NRT_SUCCESS) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tensors_.find(tensor);
  return it == tensors_.end() ? nullptr : it->second->data();
}

NRT_STATUS Runtime::MemoryStats(uint32_t vnc, nrt_vnc_memory_stats_t* stats, size_t size_in,
                                size_t* size_out) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (stats == nullptr || vnc >= config_.num_cores) {
    return Fail(NRT_INVALID, "nrt_get_vnc_memory_stats: null stats or no such NeuronCore");
  }
  nrt_vnc_memory_stats_t full;
  {
    std::lock_guard<std::mutex> lock(mu_);
    full.bytes_used = device_bytes_used_[vnc];
  }
  full.bytes_limit = config_.hbm_bytes_per_core;
  const size_t n = std::min(size_in, sizeof(full));
  memcpy(stats, &full, n);
  if (size_out != nullptr) *size_out = n;
  return NRT_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Tensor sets

NRT_STATUS Runtime::AllocateSet(void** set) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (set == nullptr) return Fail(NRT_INVALID, "nrt_allocate_tensor_set: null output pointer");
  auto ts = std::make_unique<TensorSet>();
  std::lock_guard<std::mutex> lock(mu_);
  *set = ts.get();
  sets_[ts.get()] = std::move(ts);
  return NRT_SUCCESS;
}

void Runtime::DestroySet(void** set) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (set == nullptr || *set == nullptr || Ready() != NRT_SUCCESS) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (sets_.erase(*set) == 0) {
    ReportError("nrt_destroy_tensor_set: not a live tensor set (destroyed twice?)");
    return;
  }
  *set = nullptr;
}

NRT_STATUS Runtime::AddToSet(void* set, const char* name, nrt_tensor_t* tensor) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (name == nullptr) return Fail(NRT_INVALID, "nrt_add_tensor_to_tensor_set: null name");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set);
  if (it == sets_.end()) {
    return Fail(NRT_INVALID_HANDLE, "nrt_add_tensor_to_tensor_set: not a live tensor set");
  }
  if (tensors_.count(tensor) == 0) {
    return Fail(NRT_INVALID_HANDLE, "nrt_add_tensor_to_tensor_set: not a live tensor");
  }
  it->second->tensors[name] = tensor;
  return NRT_SUCCESS;
}

NRT_STATUS Runtime::GetFromSet(void* set, const char* name, nrt_tensor_t** tensor) {
  std::shared_lock<std::shared_mutex> life(life_mu_);
  if (NRT_STATUS s = Ready(); s != NRT_SUCCESS) return s;
  if (name == nullptr || tensor == nullptr) {
    return Fail(NRT_INVALID, "nrt_get_tensor_from_tensor_set: null name or output pointer");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set);
  if (it == sets_.end()) {
    return Fail(NRT_INVALID_HANDLE, "nrt_get_tensor_from_tensor_set: not a live tensor set");
  }
  auto named = it->second->tensors.find(name);
  if (named == it->second->tensors.end()) return NRT_INVALID;  // a lookup miss is not an error
  *tensor = named->second;
  return NRT_SUCCESS;
}

}  // namespace nrtsim
