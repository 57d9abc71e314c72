// The public C API of the simulated runtime (nrt/nrt.h, nrt_experimental.h, nrt_sys_trace.h):
// argument plumbing onto nrtsim::Runtime. Nothing here throws across the C ABI.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_profile.h"
#include "nrt/nrt_sys_trace.h"
#include "runtime.h"
#include "sys_trace.h"

using nrtsim::Runtime;

struct nrt_sys_trace_config {
  nrtsim::TraceCaptureConfig config;
};

struct nrt_sys_trace_fetch_options {
  nrtsim::TraceFetchOptions options;
};

namespace {

// What the simulator does not model says so once per function, then fails cleanly (runtime.h).
using nrtsim::Unsupported;

char* DupString(const char* s) {
  const size_t n = strlen(s) + 1;
  char* out = static_cast<char*>(malloc(n));
  if (out != nullptr) memcpy(out, s, n);
  return out;
}

NRT_STATUS TypeList(const bool* enabled, const char*** event_types, size_t* count) {
  if (event_types == nullptr || count == nullptr) return NRT_INVALID;
  const char** list =
      static_cast<const char**>(calloc(nrtsim::kNumTraceEventTypes, sizeof(const char*)));
  if (list == nullptr) return NRT_RESOURCE;
  size_t n = 0;
  for (int i = 0; i < nrtsim::kNumTraceEventTypes; ++i) {
    if (enabled != nullptr && !enabled[i]) continue;
    list[n] = DupString(nrtsim::TraceEventTypeName(static_cast<nrtsim::TraceEventType>(i)));
    if (list[n] == nullptr) {
      nrt_sys_trace_free_event_types(list, n);
      return NRT_RESOURCE;
    }
    ++n;
  }
  *event_types = list;
  *count = n;
  return NRT_SUCCESS;
}

}  // namespace

extern "C" {

NRT_STATUS nrt_get_instance_info(nrt_instance_info_t* info, size_t instance_info_len) {
  if (info == nullptr) return NRT_INVALID;
  nrt_instance_info_t full{};
  full.family = NRT_INSTANCE_TRN1;
  full.size = NRT_INSTANCE_SIZE_UNKNOWN;
  snprintf(full.arch_name, sizeof(full.arch_name), "%s", "trn1-sim");
  snprintf(full.device_revision, sizeof(full.device_revision), "%s", "sim");
  memcpy(info, &full, instance_info_len < sizeof(full) ? instance_info_len : sizeof(full));
  return NRT_SUCCESS;
}

NRT_STATUS nrt_init(nrt_framework_type_t framework, const char*, const char*) {
  return Runtime::Get().Init(framework);
}

void nrt_close() { Runtime::Get().Close(); }

NRT_STATUS nrt_load(const void* neff_bytes, size_t size, int32_t vnc, int32_t,
                    nrt_model_t** model) {
  return Runtime::Get().Load(neff_bytes, size, vnc, model);
}

// The simulator is one device: a collectives group of one (device 0 of 1) is a plain load;
// a larger group, whose ranks would wait for each other, is not supported.
NRT_STATUS nrt_load_collectives(const void* neff_bytes, size_t size, int32_t vnc, int32_t,
                                uint32_t ctx_device_id, uint32_t ctx_device_count,
                                nrt_model_t** model) {
  // A rank's model loads as nrt_load loads it; its collective ops (all_reduce) run across the
  // group nrt_cc_global_comm_init joins, which must be this rank's (sim/README.md, "Collectives").
  if (ctx_device_count == 0 || ctx_device_id >= ctx_device_count) {
    nrtsim::ReportError("nrt_load_collectives: ctx_device_id " + std::to_string(ctx_device_id) +
                        " is not below ctx_device_count " + std::to_string(ctx_device_count));
    return NRT_INVALID;
  }
  return Runtime::Get().Load(neff_bytes, size, vnc, model, ctx_device_id, ctx_device_count);
}

NRT_STATUS nrt_unload(nrt_model_t* model) { return Runtime::Get().Unload(model); }

NRT_STATUS nrt_get_model_nc_count(const nrt_model_t* model, uint32_t* vnc_count) {
  uint32_t vnc = 0;
  if (vnc_count == nullptr) return NRT_INVALID;
  NRT_STATUS s = Runtime::Get().ModelVnc(model, &vnc);
  if (s == NRT_SUCCESS) *vnc_count = 1;
  return s;
}

NRT_STATUS nrt_get_model_vnc_count(const nrt_model_t* model, uint32_t* vnc_count) {
  return nrt_get_model_nc_count(model, vnc_count);
}

NRT_STATUS nrt_get_total_nc_count(uint32_t* n) { return Runtime::Get().CoreCount(n, true); }
NRT_STATUS nrt_get_total_vnc_count(uint32_t* n) { return Runtime::Get().CoreCount(n, true); }
NRT_STATUS nrt_get_visible_nc_count(uint32_t* n) { return Runtime::Get().CoreCount(n); }
NRT_STATUS nrt_get_visible_vnc_count(uint32_t* n) { return Runtime::Get().CoreCount(n); }

NRT_STATUS nrt_allocate_tensor_set(nrt_tensor_set_t** result) {
  return Runtime::Get().AllocateSet(result);
}

void nrt_destroy_tensor_set(nrt_tensor_set_t** tensor_set) {
  Runtime::Get().DestroySet(tensor_set);
}

NRT_STATUS nrt_add_tensor_to_tensor_set(nrt_tensor_set_t* tensor_set, const char* tensor_name,
                                        nrt_tensor_t* tensor) {
  return Runtime::Get().AddToSet(tensor_set, tensor_name, tensor);
}

NRT_STATUS nrt_get_tensor_from_tensor_set(nrt_tensor_set_t* tensor_set, const char* tensor_name,
                                          nrt_tensor_t** tensor) {
  return Runtime::Get().GetFromSet(tensor_set, tensor_name, tensor);
}

NRT_STATUS nrt_execute(nrt_model_t* model, const nrt_tensor_set_t* input_set,
                       nrt_tensor_set_t* output_set) {
  return Runtime::Get().Execute(model, input_set, output_set, 1);
}

NRT_STATUS nrt_execute_repeat(nrt_model_t* model, const nrt_tensor_set_t* input_set,
                              nrt_tensor_set_t* output_set, int repeat_count) {
  return Runtime::Get().Execute(model, input_set, output_set, repeat_count);
}

NRT_STATUS nrt_build_global_comm(int32_t, uint32_t, uint32_t) {
  return Unsupported("nrt_build_global_comm");
}

NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t placement, int vnc, size_t size,
                               const char* name, nrt_tensor_t** tensor) {
  return Runtime::Get().AllocateTensor(placement, vnc, size, name, tensor);
}

void nrt_tensor_free(nrt_tensor_t** tensor) { Runtime::Get().FreeTensor(tensor); }

NRT_STATUS nrt_tensor_read(const nrt_tensor_t* tensor, void* buf, size_t offset, size_t size) {
  return Runtime::Get().ReadTensor(tensor, buf, offset, size);
}

NRT_STATUS nrt_tensor_write(nrt_tensor_t* tensor, const void* buf, size_t offset, size_t size) {
  return Runtime::Get().WriteTensor(tensor, buf, offset, size);
}

NRT_STATUS nrt_tensor_read_batch(const nrt_tensor_batch_t* batches, uint64_t num_batches, bool) {
  if (batches == nullptr && num_batches != 0) return NRT_INVALID;
  for (uint64_t b = 0; b < num_batches; ++b) {
    if (batches[b].ops == nullptr && batches[b].num_ops != 0) return NRT_INVALID;
    for (uint32_t i = 0; i < batches[b].num_ops; ++i) {
      const nrt_tensor_batch_op_t& op = batches[b].ops[i];
      NRT_STATUS s = nrt_tensor_read(batches[b].tensor, op.buffer, op.offset, op.size);
      if (s != NRT_SUCCESS) return s;
    }
  }
  return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_write_batch(const nrt_tensor_batch_t* batches, uint64_t num_batches,
                                  bool) {
  if (batches == nullptr && num_batches != 0) return NRT_INVALID;
  for (uint64_t b = 0; b < num_batches; ++b) {
    if (batches[b].ops == nullptr && batches[b].num_ops != 0) return NRT_INVALID;
    for (uint32_t i = 0; i < batches[b].num_ops; ++i) {
      const nrt_tensor_batch_op_t& op = batches[b].ops[i];
      NRT_STATUS s = nrt_tensor_write(const_cast<nrt_tensor_t*>(batches[b].tensor), op.buffer,
                                      op.offset, op.size);
      if (s != NRT_SUCCESS) return s;
    }
  }
  return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_copy(const nrt_tensor_t* src, size_t src_offset, nrt_tensor_t* dst,
                           size_t dst_offset, size_t size) {
  return Runtime::Get().CopyTensor(src, src_offset, dst, dst_offset, size);
}

size_t nrt_tensor_get_size(const nrt_tensor_t* tensor) {
  return Runtime::Get().TensorSize(tensor);
}

NRT_STATUS nrt_tensor_memset(nrt_tensor_t* tensor, uint64_t offset, int value, size_t size) {
  return Runtime::Get().MemsetTensor(tensor, offset, value, size);
}

NRT_STATUS nrt_tensor_allocate_empty(const char* name, nrt_tensor_t** tensor) {
  return Runtime::Get().AllocateEmpty(name, tensor);
}

NRT_STATUS nrt_tensor_attach_buffer(nrt_tensor_t* tensor, void* buffer, size_t size) {
  return Runtime::Get().AttachBuffer(tensor, buffer, size);
}

NRT_STATUS nrt_tensor_allocate_slice(const nrt_tensor_t* tensor_source, size_t offset,
                                     size_t size, const char* name,
                                     nrt_tensor_t** tensor_slice) {
  return Runtime::Get().AllocateSlice(tensor_source, offset, size, name, tensor_slice);
}

void* nrt_tensor_get_va(const nrt_tensor_t* tensor) { return Runtime::Get().TensorVa(tensor); }

NRT_STATUS nrt_tensor_get_device_allocation_info(const nrt_tensor_t*,
                                                 nrt_tensor_device_allocation_info_t*) {
  return Unsupported("nrt_tensor_get_device_allocation_info");
}

// Executions complete before nrt_execute returns, so every output is always complete.
NRT_STATUS nrt_tensor_check_output_completion(const nrt_tensor_t* output_tensor, int64_t,
                                              uint64_t) {
  return output_tensor == nullptr ? NRT_INVALID : NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_reset_output_completion(nrt_tensor_t* output_tensor) {
  return output_tensor == nullptr ? NRT_INVALID : NRT_SUCCESS;
}

NRT_STATUS nrt_get_dmabuf_fd(uint64_t, uint64_t, int*) { return Unsupported("nrt_get_dmabuf_fd"); }

NRT_STATUS nrt_host_device_id_get(int neuron_dev, uint32_t* host_device_id) {
  if (neuron_dev != 0 || host_device_id == nullptr) return NRT_INVALID;
  *host_device_id = 0;  // one simulated device
  return NRT_SUCCESS;
}

NRT_STATUS nrt_host_device_id_rid_map_get(uint32_t*, uint32_t*) {
  return Unsupported("nrt_host_device_id_rid_map_get");
}

NRT_STATUS nrt_get_hbm_mmap_va(int, int, void**, size_t*) {
  return Unsupported("nrt_get_hbm_mmap_va");
}

NRT_STATUS nrt_get_vnc_memory_stats(uint32_t vnc, nrt_vnc_memory_stats_t* stats,
                                    size_t stats_size_in, size_t* stats_size_out) {
  return Runtime::Get().MemoryStats(vnc, stats, stats_size_in, stats_size_out);
}

NRT_STATUS nrt_get_attached_efa_bdf(const void*, char*, size_t*) {
  return Unsupported("nrt_get_attached_efa_bdf");
}

NRT_STATUS nrt_cc_global_comm_init(uint32_t vnc, uint32_t g_device_id, uint32_t g_device_count) {
  return Runtime::Get().CommInit(vnc, g_device_id, g_device_count);
}

// --- nrt_experimental.h ---

NRT_STATUS nrt_get_model_tensor_info(nrt_model_t* model, nrt_tensor_info_array_t** tensor_info) {
  return Runtime::Get().TensorInfo(model, tensor_info);
}

NRT_STATUS nrt_get_model_instance_count(nrt_model_t* model, uint32_t* instance_count) {
  uint32_t vnc = 0;
  if (instance_count == nullptr) return NRT_INVALID;
  NRT_STATUS s = Runtime::Get().ModelVnc(model, &vnc);
  if (s == NRT_SUCCESS) *instance_count = 1;
  return s;
}

NRT_STATUS nrt_free_model_tensor_info(nrt_tensor_info_array_t* tensor_info) {
  if (tensor_info == nullptr) return NRT_INVALID;
  for (uint64_t i = 0; i < tensor_info->tensor_count; ++i) {
    free(tensor_info->tensor_array[i].shape);
  }
  free(tensor_info);
  return NRT_SUCCESS;
}

NRT_STATUS nrt_trace_start(bool) { return Unsupported("nrt_trace_start"); }
NRT_STATUS nrt_trace_stop(const char*) { return Unsupported("nrt_trace_stop"); }

void* nrt_get_libnccl_net(int* err, char* err_msg, size_t err_msg_size) {
  Unsupported("nrt_get_libnccl_net");
  if (err != nullptr) *err = 1;
  if (err_msg != nullptr && err_msg_size > 0) {
    snprintf(err_msg, err_msg_size, "%s", "not supported by the simulated runtime");
  }
  return nullptr;
}

NRT_STATUS nrt_set_pool_eng_ucode(const nrt_ucode_info*) {
  return Unsupported("nrt_set_pool_eng_ucode");
}

NRT_STATUS nrt_memcpy_to_device(void*, const void*, size_t) {
  return Unsupported("nrt_memcpy_to_device");
}

NRT_STATUS nrt_register_async_exec_callback(NRT_ASYNC_EXEC_STATUS_CALLBACK, void*) {
  return Unsupported("nrt_register_async_exec_callback");
}

NRT_STATUS nrt_barrier(int32_t, uint32_t, uint32_t) { return Unsupported("nrt_barrier"); }

NRT_STATUS nrt_all_gather(int32_t, uint32_t, uint32_t, uint32_t, void*, void*) {
  return Unsupported("nrt_all_gather");
}

// Executions are synchronous: nothing is ever queued.
NRT_STATUS nrt_async_drain_queued_execs(int32_t) { return NRT_SUCCESS; }

NRT_STATUS nrt_get_model_info(const nrt_model_t* model, nrt_model_info_t* info,
                              size_t info_size_in, size_t* info_size_out) {
  if (info == nullptr) return NRT_INVALID;
  nrt_model_info_t full{};
  NRT_STATUS s = Runtime::Get().ModelVnc(model, &full.vnc);
  if (s != NRT_SUCCESS) return s;
  const size_t n = info_size_in < sizeof(full) ? info_size_in : sizeof(full);
  memcpy(info, &full, n);
  if (info_size_out != nullptr) *info_size_out = n;
  return NRT_SUCCESS;
}

// --- nrt_profile.h ---

NRT_STATUS nrt_profile_start(nrt_model_t* model, const char* filename) {
  return Runtime::Get().ProfileStart(model, filename);
}

NRT_STATUS nrt_profile_stop(const char* filename) { return Runtime::Get().ProfileStop(filename); }

// --- nrt_sys_trace.h ---

NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t** options) {
  if (options == nullptr) return NRT_INVALID;
  *options = new (std::nothrow) nrt_sys_trace_config();
  return *options == nullptr ? NRT_RESOURCE : NRT_SUCCESS;
}

void nrt_sys_trace_config_set_defaults(nrt_sys_trace_config_t* options) {
  if (options != nullptr) options->config = nrtsim::TraceCaptureConfig{};
}

void nrt_sys_trace_config_free(nrt_sys_trace_config_t* options) { delete options; }

void nrt_sys_trace_config_set_max_events_per_nc(nrt_sys_trace_config_t* options,
                                                uint64_t max_events_per_nc) {
  if (options != nullptr) options->config.max_events_per_nc = max_events_per_nc;
}

void nrt_sys_trace_config_set_capture_enabled_for_nc(nrt_sys_trace_config_t* options,
                                                     uint32_t nc_idx, bool enabled) {
  if (options == nullptr || nc_idx >= 64) return;
  const uint64_t bit = 1ull << nc_idx;
  options->config.enabled_cores =
      enabled ? (options->config.enabled_cores | bit) : (options->config.enabled_cores & ~bit);
}

NRT_STATUS nrt_sys_trace_config_set_capture_enabled_for_event_type(
    nrt_sys_trace_config_t* options, const char* event_type, bool enabled) {
  nrtsim::TraceEventType type;
  if (options == nullptr || event_type == nullptr ||
      !nrtsim::TraceEventTypeFromName(event_type, &type)) {
    return NRT_INVALID;
  }
  options->config.enabled_types[static_cast<int>(type)] = enabled;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_get_event_types(const char*** event_types, size_t* count) {
  return TypeList(nullptr, event_types, count);
}

void nrt_sys_trace_free_event_types(const char** event_types, size_t count) {
  if (event_types == nullptr) return;
  for (size_t i = 0; i < count; ++i) free(const_cast<char*>(event_types[i]));
  free(event_types);
}

NRT_STATUS nrt_sys_trace_config_get_enabled_event_types(nrt_sys_trace_config_t* options,
                                                        const char*** event_types,
                                                        size_t* count) {
  if (options == nullptr) return NRT_INVALID;
  return TypeList(options->config.enabled_types, event_types, count);
}

NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t* options) {
  return Runtime::Get().TraceStart(options != nullptr ? options->config
                                                      : nrtsim::TraceCaptureConfig{});
}

NRT_STATUS nrt_sys_trace_stop() { return Runtime::Get().TraceStop(); }

NRT_STATUS nrt_sys_trace_fetch_options_allocate(nrt_sys_trace_fetch_options_t** options) {
  if (options == nullptr) return NRT_INVALID;
  *options = new (std::nothrow) nrt_sys_trace_fetch_options();
  return *options == nullptr ? NRT_RESOURCE : NRT_SUCCESS;
}

void nrt_sys_trace_fetch_options_set_defaults(nrt_sys_trace_fetch_options_t* options) {
  if (options != nullptr) options->options = nrtsim::TraceFetchOptions{};
}

void nrt_sys_trace_fetch_options_free(nrt_sys_trace_fetch_options_t* options) { delete options; }

void nrt_sys_trace_fetch_options_set_max_events_per_nc(nrt_sys_trace_fetch_options_t* options,
                                                       uint64_t max_events_per_nc) {
  if (options != nullptr) options->options.max_events_per_nc = max_events_per_nc;
}

void nrt_sys_trace_fetch_options_set_nc_idx(nrt_sys_trace_fetch_options_t* options,
                                            uint64_t nc_idx) {
  if (options != nullptr) {
    options->options.nc_idx = nc_idx > (1ull << 31) ? (1ll << 31) : static_cast<int64_t>(nc_idx);
  }
}

NRT_STATUS nrt_sys_trace_fetch_events(char** buffer, size_t* written_size,
                                      const nrt_sys_trace_fetch_options_t* options) {
  if (buffer == nullptr || written_size == nullptr) return NRT_INVALID;
  // Written in place in memory from malloc() and handed out as it is (no copy).
  nrtsim::TraceDocument json;
  try {
    NRT_STATUS s = Runtime::Get().TraceFetch(
        options != nullptr ? options->options : nrtsim::TraceFetchOptions{}, &json);
    if (s != NRT_SUCCESS) return s;
    *written_size = json.size();
    *buffer = json.Release();
  } catch (const std::bad_alloc&) {
    return NRT_RESOURCE;
  }
  return NRT_SUCCESS;
}

void nrt_sys_trace_buffer_free(char* buffer) { free(buffer); }

}  // extern "C"
