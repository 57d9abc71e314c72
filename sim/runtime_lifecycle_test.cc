// The runtime's lifecycle as documented: counts work before nrt_init, other calls report
// NRT_UNINITIALIZED before it and NRT_CLOSED after nrt_close, and nrt_init may start again.
// One test, because the runtime is one per process.
#include <cstdlib>

#include "gtest/gtest.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_sys_trace.h"
#include "sim/testing/runtime_testing.h"

namespace {

const char kModel[] =
    "model add\ninput a fp32 [2]\ninput b fp32 [2]\noutput out fp32 [2]\nout = add(a, b)\n";

void ExpectEveryCallReturns(NRT_STATUS expected) {
  const std::string bytes = nrtsim::testing::ModelBytes(kModel);
  nrt_model_t* model = nullptr;
  EXPECT_EQ(nrt_load(bytes.data(), bytes.size(), -1, -1, &model), expected);
  EXPECT_EQ(model, nullptr);
  nrt_tensor_t* tensor = nullptr;
  EXPECT_EQ(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 8, "t", &tensor), expected);
  EXPECT_EQ(nrt_tensor_allocate_empty("t", &tensor), expected);
  nrt_tensor_set_t* set = nullptr;
  EXPECT_EQ(nrt_allocate_tensor_set(&set), expected);
  EXPECT_EQ(nrt_execute(nullptr, nullptr, nullptr), expected);
  EXPECT_EQ(nrt_execute_repeat(nullptr, nullptr, nullptr, 3), expected);
  EXPECT_EQ(nrt_unload(nullptr), expected);
  char buf[4];
  EXPECT_EQ(nrt_tensor_read(nullptr, buf, 0, 4), expected);
  EXPECT_EQ(nrt_tensor_write(nullptr, buf, 0, 4), expected);
  EXPECT_EQ(nrt_tensor_copy(nullptr, 0, nullptr, 0, 4), expected);
  EXPECT_EQ(nrt_tensor_memset(nullptr, 0, 0, 4), expected);
  nrt_tensor_info_array_t* info = nullptr;
  EXPECT_EQ(nrt_get_model_tensor_info(nullptr, &info), expected);
  EXPECT_EQ(nrt_sys_trace_start(nullptr), expected);
  EXPECT_EQ(nrt_sys_trace_stop(), expected);
  char* json = nullptr;
  size_t size = 0;
  EXPECT_EQ(nrt_sys_trace_fetch_events(&json, &size, nullptr), expected);
  EXPECT_EQ(nrt_tensor_get_size(nullptr), 0u);
  nrt_tensor_free(&tensor);        // harmless
  nrt_destroy_tensor_set(&set);    // harmless
  nrt_close();                     // harmless
}

TEST(RuntimeLifecycle, BeforeInitAfterCloseAndAgain) {
  ASSERT_EQ(setenv("NRT_SIM_NUM_CORES", "3", 1), 0);
  uint32_t n = 0;
  EXPECT_EQ(nrt_get_total_nc_count(&n), NRT_SUCCESS);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(nrt_get_visible_vnc_count(&n), NRT_SUCCESS);
  EXPECT_EQ(n, 3u);
  EXPECT_EQ(nrt_get_total_vnc_count(nullptr), NRT_INVALID);

  ExpectEveryCallReturns(NRT_UNINITIALIZED);

  EXPECT_EQ(nrt_init(static_cast<nrt_framework_type_t>(77), "", ""), NRT_INVALID);
  ASSERT_EQ(setenv("NRT_SIM_NUM_CORES", "many", 1), 0);
  EXPECT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_INVALID);
  EXPECT_EQ(nrt_get_visible_nc_count(&n), NRT_INVALID);
  ASSERT_EQ(setenv("NRT_SIM_NUM_CORES", "2", 1), 0);
  ASSERT_EQ(setenv("NRT_SIM_TIME_SCALE", "-1", 1), 0);
  EXPECT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_INVALID);
  ASSERT_EQ(setenv("NRT_SIM_TIME_SCALE", "0", 1), 0);

  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH, "2.1", "1.0"), NRT_SUCCESS);
  EXPECT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_PYTORCH, "2.1", "1.0"), NRT_FAILURE);
  EXPECT_EQ(nrt_get_visible_nc_count(&n), NRT_SUCCESS);
  EXPECT_EQ(n, 2u);
  nrt_model_t* model = nrtsim::testing::Load(kModel, -1);
  ASSERT_NE(model, nullptr);
  nrt_close();

  ExpectEveryCallReturns(NRT_CLOSED);
  // The model handle died with the runtime.
  EXPECT_EQ(nrt_unload(model), NRT_CLOSED);

  ASSERT_EQ(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), NRT_SUCCESS);
  EXPECT_EQ(nrt_unload(model), NRT_INVALID_HANDLE);
  nrt_model_t* again = nrtsim::testing::Load(kModel, 1);
  EXPECT_NE(again, nullptr);
  EXPECT_EQ(nrt_unload(again), NRT_SUCCESS);
  nrt_close();
}

}  // namespace
