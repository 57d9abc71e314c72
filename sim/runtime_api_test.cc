// Conformance of the simulated runtime's C API: success and error paths, status codes and
// results of each function, as a program written against nrt/nrt.h sees them.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "sim/testing/runtime_testing.h"

namespace {

using nrtsim::testing::DeviceFloats;
using nrtsim::testing::Load;
using nrtsim::testing::ModelBytes;
using nrtsim::testing::ReadFloats;
using nrtsim::testing::Set;

const char kAddModel[] =
    "model add\ninput a fp32 [4]\ninput b fp32 [4]\noutput out fp32 [4]\nout = add(a, b)\n";

class RuntimeApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS); }
  void TearDown() override { nrt_close(); }
};

TEST_F(RuntimeApiTest, LoadRejectsBadArgumentsAndFiles) {
  const std::string bytes = ModelBytes(kAddModel);
  nrt_model_t* model = nullptr;
  EXPECT_EQ(nrt_load(nullptr, 10, -1, -1, &model), NRT_INVALID);
  EXPECT_EQ(nrt_load(bytes.data(), bytes.size(), -1, -1, nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_load(bytes.data(), bytes.size(), 2, -1, &model), NRT_INVALID);  // 2 cores
  EXPECT_EQ(nrt_load(bytes.data(), bytes.size(), -2, -1, &model), NRT_INVALID);
  EXPECT_EQ(nrt_load(bytes.data(), bytes.size() - 1, -1, -1, &model), NRT_INVALID);
  EXPECT_EQ(nrt_load("garbage", 7, -1, -1, &model), NRT_INVALID);
  std::string future = bytes;
  future[8] = 9;  // major version 9
  EXPECT_EQ(nrt_load(future.data(), future.size(), -1, -1, &model), NRT_UNSUPPORTED_NEFF_VERSION);
  EXPECT_EQ(model, nullptr);
}

TEST_F(RuntimeApiTest, LoadPlacesOnRequestedOrLeastLoadedCore) {
  nrt_model_t* a = Load(kAddModel, -1);
  nrt_model_t* b = Load(kAddModel, -1);
  nrt_model_t* c = Load(kAddModel, 1);
  nrt_model_info_t info{};
  size_t written = 0;
  ASSERT_EQ(nrt_get_model_info(a, &info, sizeof(info), &written), NRT_SUCCESS);
  EXPECT_EQ(written, sizeof(info));
  EXPECT_EQ(info.vnc, 0u);
  ASSERT_EQ(nrt_get_model_info(b, &info, sizeof(info), &written), NRT_SUCCESS);
  EXPECT_EQ(info.vnc, 1u);
  ASSERT_EQ(nrt_get_model_info(c, &info, sizeof(info), &written), NRT_SUCCESS);
  EXPECT_EQ(info.vnc, 1u);
  uint32_t count = 0;
  EXPECT_EQ(nrt_get_model_vnc_count(a, &count), NRT_SUCCESS);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(nrt_unload(a), NRT_SUCCESS);
  EXPECT_EQ(nrt_unload(a), NRT_INVALID_HANDLE);
  EXPECT_EQ(nrt_get_model_info(a, &info, sizeof(info), &written), NRT_INVALID_HANDLE);
  EXPECT_EQ(nrt_unload(reinterpret_cast<nrt_model_t*>(&count)), NRT_INVALID_HANDLE);
}

// A rank's model loads as nrt_load loads it, in a group of any size (the model format has no
// collective op; collectives go through nrta_cc_*).
TEST_F(RuntimeApiTest, LoadCollectivesOfAGroupOfOneIsALoad) {
  const std::string bytes = ModelBytes(kAddModel);
  nrt_model_t* model = nullptr;
  ASSERT_EQ(nrt_load_collectives(bytes.data(), bytes.size(), 1, -1, 0, 1, &model), NRT_SUCCESS);
  nrt_model_info_t info{};
  size_t written = 0;
  ASSERT_EQ(nrt_get_model_info(model, &info, sizeof(info), &written), NRT_SUCCESS);
  EXPECT_EQ(info.vnc, 1u);
  EXPECT_EQ(nrt_unload(model), NRT_SUCCESS);
  EXPECT_EQ(nrt_load_collectives(nullptr, 10, -1, -1, 0, 1, &model), NRT_INVALID);
  nrt_model_t* ranked = nullptr;
  ASSERT_EQ(nrt_load_collectives(bytes.data(), bytes.size(), -1, -1, 1, 4, &ranked), NRT_SUCCESS);
  EXPECT_EQ(nrt_unload(ranked), NRT_SUCCESS);
  ranked = nullptr;
  EXPECT_EQ(nrt_load_collectives(bytes.data(), bytes.size(), -1, -1, 4, 4, &ranked), NRT_INVALID);
  EXPECT_EQ(ranked, nullptr);
}

TEST_F(RuntimeApiTest, TensorInfoListsInputsThenOutputs) {
  nrt_model_t* model = Load(
      "model mm\ninput x bf16 [2,3]\ninput w bf16 [3,5]\noutput y bf16 [2,5]\n"
      "y = matmul(x, w)\n", 0);
  nrt_tensor_info_array_t* info = nullptr;
  ASSERT_EQ(nrt_get_model_tensor_info(model, &info), NRT_SUCCESS);
  ASSERT_EQ(info->tensor_count, 3u);
  EXPECT_STREQ(info->tensor_array[0].name, "x");
  EXPECT_EQ(info->tensor_array[0].usage, NRT_TENSOR_USAGE_INPUT);
  EXPECT_EQ(info->tensor_array[0].size, 12u);
  EXPECT_EQ(info->tensor_array[0].dtype, NRT_DTYPE_BFLOAT16);
  ASSERT_EQ(info->tensor_array[1].ndim, 2u);
  EXPECT_EQ(info->tensor_array[1].shape[0], 3u);
  EXPECT_EQ(info->tensor_array[1].shape[1], 5u);
  EXPECT_STREQ(info->tensor_array[2].name, "y");
  EXPECT_EQ(info->tensor_array[2].usage, NRT_TENSOR_USAGE_OUTPUT);
  EXPECT_EQ(info->tensor_array[2].size, 20u);
  EXPECT_EQ(nrt_free_model_tensor_info(info), NRT_SUCCESS);
  EXPECT_EQ(nrt_get_model_tensor_info(model, nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_free_model_tensor_info(nullptr), NRT_INVALID);
}

TEST_F(RuntimeApiTest, TensorAllocateChecksArgumentsAndMemory) {
  nrt_tensor_t* t = nullptr;
  EXPECT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 0, "t", &t), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 5, 8, "t", &t), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, -1, 8, "t", &t), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_allocate(static_cast<nrt_tensor_placement_t>(9), 0, 8, "t", &t),
            NRT_INVALID);
  EXPECT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 8, "t", nullptr), NRT_INVALID);
  // More than a core's 16 GiB of device memory: refused without touching host memory.
  EXPECT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 17ull << 30, "big", &t),
            NRT_RESOURCE);
  EXPECT_EQ(t, nullptr);

  ASSERT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 1, 1000, "t", &t), NRT_SUCCESS);
  EXPECT_EQ(nrt_tensor_get_size(t), 1000u);
  nrt_vnc_memory_stats_t stats{};
  size_t written = 0;
  ASSERT_EQ(nrt_get_vnc_memory_stats(1, &stats, sizeof(stats), &written), NRT_SUCCESS);
  EXPECT_EQ(stats.bytes_used, 1000u);
  EXPECT_EQ(stats.bytes_limit, 16ull << 30);
  nrt_tensor_free(&t);
  EXPECT_EQ(t, nullptr);
  ASSERT_EQ(nrt_get_vnc_memory_stats(1, &stats, sizeof(stats), &written), NRT_SUCCESS);
  EXPECT_EQ(stats.bytes_used, 0u);
  EXPECT_EQ(nrt_get_vnc_memory_stats(7, &stats, sizeof(stats), &written), NRT_INVALID);
}

TEST_F(RuntimeApiTest, ReadWriteMemsetRespectBounds) {
  nrt_tensor_t* t = nullptr;
  ASSERT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "t", &t), NRT_SUCCESS);
  const char data[] = "0123456789abcdef";
  EXPECT_EQ(nrt_tensor_write(t, data, 0, 16), NRT_SUCCESS);
  char out[17] = {};
  EXPECT_EQ(nrt_tensor_read(t, out, 4, 8), NRT_SUCCESS);
  EXPECT_EQ(std::string(out, 8), "456789ab");
  EXPECT_EQ(nrt_tensor_read(t, out, 10, 7), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_read(t, out, 17, 0), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_read(t, out, SIZE_MAX, 2), NRT_INVALID);  // no overflow
  EXPECT_EQ(nrt_tensor_write(t, data, 8, 9), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_write(t, nullptr, 0, 4), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_memset(t, 2, 'z', 3), NRT_SUCCESS);
  EXPECT_EQ(nrt_tensor_memset(t, 15, 'z', 2), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_read(t, out, 0, 16), NRT_SUCCESS);
  EXPECT_EQ(std::string(out, 16), "01zzz56789abcdef");
  nrt_tensor_t* dead = t;
  nrt_tensor_free(&t);
  EXPECT_EQ(nrt_tensor_read(dead, out, 0, 4), NRT_INVALID_HANDLE);
  nrt_tensor_free(&dead);  // a second free is reported, not a crash
}

TEST_F(RuntimeApiTest, CopyStaysOnOneCore) {
  nrt_tensor_t* a = DeviceFloats(0, {1, 2, 3, 4}, "a");
  nrt_tensor_t* b = DeviceFloats(0, {0, 0, 0, 0}, "b");
  nrt_tensor_t* other = DeviceFloats(1, {0, 0, 0, 0}, "other");
  nrt_tensor_t* host = nullptr;
  ASSERT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 16, "host", &host), NRT_SUCCESS);
  EXPECT_EQ(nrt_tensor_copy(a, 4, b, 0, 8), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(b), (std::vector<float>{2, 3, 0, 0}));
  EXPECT_EQ(nrt_tensor_copy(a, 0, other, 0, 16), NRT_INVALID);
  EXPECT_EQ(nrt_tensor_copy(a, 0, host, 0, 16), NRT_SUCCESS);
  EXPECT_EQ(nrt_tensor_copy(host, 0, other, 0, 16), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(other), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(nrt_tensor_copy(a, 8, b, 0, 16), NRT_INVALID);
  EXPECT_NE(nrt_tensor_get_va(host), nullptr);
}

TEST_F(RuntimeApiTest, EmptyTensorsAttachBuffersAndSlicesShareStorage) {
  nrt_tensor_t* empty = nullptr;
  ASSERT_EQ(nrt_tensor_allocate_empty("empty", &empty), NRT_SUCCESS);
  float buf[4] = {};
  EXPECT_EQ(nrt_tensor_read(empty, buf, 0, 4), NRT_INVALID);  // nothing attached
  float mine[4] = {5, 6, 7, 8};
  EXPECT_EQ(nrt_tensor_attach_buffer(empty, mine, sizeof(mine)), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(empty), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(nrt_tensor_attach_buffer(empty, nullptr, 4), NRT_INVALID);

  nrt_tensor_t* whole = DeviceFloats(0, {1, 2, 3, 4}, "whole");
  nrt_tensor_t* slice = nullptr;
  ASSERT_EQ(nrt_tensor_allocate_slice(whole, 8, 8, "slice", &slice), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(slice), (std::vector<float>{3, 4}));
  const float nine = 9;
  EXPECT_EQ(nrt_tensor_write(slice, &nine, 0, 4), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(whole), (std::vector<float>{1, 2, 9, 4}));
  EXPECT_EQ(nrt_tensor_allocate_slice(whole, 12, 8, "past", &slice), NRT_INVALID);
  // The slice keeps the storage alive after its source is freed.
  nrt_tensor_t* s2 = nullptr;
  ASSERT_EQ(nrt_tensor_allocate_slice(whole, 0, 4, "first", &s2), NRT_SUCCESS);
  nrt_tensor_free(&whole);
  EXPECT_EQ(ReadFloats(s2), (std::vector<float>{1}));
}

TEST_F(RuntimeApiTest, TensorSets) {
  nrt_tensor_t* t = DeviceFloats(0, {1}, "t");
  nrt_tensor_set_t* set = nullptr;
  ASSERT_EQ(nrt_allocate_tensor_set(&set), NRT_SUCCESS);
  EXPECT_EQ(nrt_add_tensor_to_tensor_set(set, "a", t), NRT_SUCCESS);
  nrt_tensor_t* got = nullptr;
  EXPECT_EQ(nrt_get_tensor_from_tensor_set(set, "a", &got), NRT_SUCCESS);
  EXPECT_EQ(got, t);
  EXPECT_EQ(nrt_get_tensor_from_tensor_set(set, "b", &got), NRT_INVALID);
  EXPECT_EQ(nrt_add_tensor_to_tensor_set(set, nullptr, t), NRT_INVALID);
  EXPECT_EQ(nrt_add_tensor_to_tensor_set(set, "c", reinterpret_cast<nrt_tensor_t*>(&got)),
            NRT_INVALID_HANDLE);
  nrt_tensor_set_t* dead = set;
  nrt_destroy_tensor_set(&set);
  EXPECT_EQ(set, nullptr);
  EXPECT_EQ(nrt_add_tensor_to_tensor_set(dead, "a", t), NRT_INVALID_HANDLE);
  nrt_destroy_tensor_set(&dead);  // reported, not a crash
}

TEST_F(RuntimeApiTest, ExecuteComputesAndChecksBindings) {
  nrt_model_t* model = Load(kAddModel, 0);
  nrt_tensor_t* a = DeviceFloats(0, {1, 2, 3, 4}, "a");
  nrt_tensor_t* b = DeviceFloats(0, {10, 20, 30, 40}, "b");
  nrt_tensor_t* out = DeviceFloats(0, {0, 0, 0, 0}, "out");
  nrt_tensor_t* small = DeviceFloats(0, {0, 0}, "small");
  nrt_tensor_set_t* in = Set({{"a", a}, {"b", b}});
  nrt_tensor_set_t* outs = Set({{"out", out}});
  ASSERT_EQ(nrt_execute(model, in, outs), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(out), (std::vector<float>{11, 22, 33, 44}));

  // In place: the output is also an input.
  nrt_tensor_set_t* in_place = Set({{"out", a}});
  ASSERT_EQ(nrt_execute_repeat(model, in, in_place, 1), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(a), (std::vector<float>{11, 22, 33, 44}));
  nrt_tensor_set_t* accumulate_in = Set({{"a", a}, {"b", b}});
  ASSERT_EQ(nrt_execute_repeat(model, accumulate_in, in_place, 3), NRT_SUCCESS);
  EXPECT_EQ(ReadFloats(a), (std::vector<float>{41, 82, 123, 164}));

  EXPECT_EQ(nrt_execute(model, Set({{"a", a}}), outs), NRT_INVALID);          // b missing
  EXPECT_EQ(nrt_execute(model, Set({{"a", a}, {"b", small}}), outs), NRT_INVALID);  // size
  EXPECT_EQ(nrt_execute(model, in, Set({})), NRT_INVALID);                     // out missing
  EXPECT_EQ(nrt_execute(nullptr, in, outs), NRT_INVALID_HANDLE);
  EXPECT_EQ(nrt_execute(model, nullptr, outs), NRT_INVALID_HANDLE);
  EXPECT_EQ(nrt_execute_repeat(model, in, outs, 0), NRT_INVALID);
  // Device tensors must be on the model's core; host tensors may feed any core.
  nrt_tensor_t* elsewhere = DeviceFloats(1, {1, 2, 3, 4}, "elsewhere");
  EXPECT_EQ(nrt_execute(model, Set({{"a", elsewhere}, {"b", b}}), outs), NRT_INVALID);
  nrt_tensor_t* host = nullptr;
  ASSERT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 16, "host", &host), NRT_SUCCESS);
  EXPECT_EQ(nrt_execute(model, Set({{"a", host}, {"b", b}}), outs), NRT_SUCCESS);
  nrt_tensor_t* dead = b;
  nrt_tensor_free(&dead);
  EXPECT_EQ(nrt_execute(model, in, outs), NRT_INVALID_HANDLE);  // b freed under the set
}

TEST_F(RuntimeApiTest, UnsupportedCallsFailCleanly) {
  EXPECT_EQ(nrt_load_collectives(nullptr, 0, 0, 0, 0, 0, nullptr), NRT_INVALID);
  EXPECT_EQ(nrt_build_global_comm(0, 0, 1), NRT_FAILURE);
  EXPECT_EQ(nrt_trace_start(false), NRT_FAILURE);
  EXPECT_EQ(nrt_barrier(0, 0, 1), NRT_FAILURE);
  EXPECT_EQ(nrt_register_async_exec_callback(nullptr, nullptr), NRT_FAILURE);
  int err = 0;
  char msg[64];
  EXPECT_EQ(nrt_get_libnccl_net(&err, msg, sizeof(msg)), nullptr);
  EXPECT_NE(err, 0);
  EXPECT_EQ(nrt_async_drain_queued_execs(0), NRT_SUCCESS);
  nrt_instance_info_t info{};
  EXPECT_EQ(nrt_get_instance_info(&info, sizeof(info)), NRT_SUCCESS);
  EXPECT_EQ(info.family, static_cast<uint32_t>(NRT_INSTANCE_TRN1));
}

}  // namespace
