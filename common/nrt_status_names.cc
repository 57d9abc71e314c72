#include "common/nrt_status_names.h"

namespace nrtprof {

const char* NrtStatusName(int status) {
  switch (status) {
    case 0: return "NRT_SUCCESS";
    case 1: return "NRT_FAILURE";
    case 2: return "NRT_INVALID";
    case 3: return "NRT_INVALID_HANDLE";
    case 4: return "NRT_RESOURCE";
    case 5: return "NRT_TIMEOUT";
    case 6: return "NRT_HW_ERROR";
    case 7: return "NRT_QUEUE_FULL";
    case 9: return "NRT_LOAD_NOT_ENOUGH_NC";
    case 10: return "NRT_UNSUPPORTED_NEFF_VERSION";
    case 11: return "NRT_FAIL_HOST_MEM_ALLOC";
    case 13: return "NRT_UNINITIALIZED";
    case 14: return "NRT_CLOSED";
    case 15: return "NRT_QUEUE_EMPTY";
    case 101: return "NRT_EXEC_UNIT_UNRECOVERABLE";
    case 1002: return "NRT_EXEC_BAD_INPUT";
    case 1003: return "NRT_EXEC_COMPLETED_WITH_NUM_ERR";
    case 1004: return "NRT_EXEC_COMPLETED_WITH_ERR";
    case 1005: return "NRT_EXEC_NC_BUSY";
    case 1006: return "NRT_EXEC_OOB";
    case 1100: return "NRT_COLL_PENDING";
    case 1200: return "NRT_EXEC_HW_ERR_COLLECTIVES";
    case 1201: return "NRT_EXEC_HW_ERR_HBM_UE";
    case 1202: return "NRT_EXEC_HW_ERR_NC_UE";
    case 1203: return "NRT_EXEC_HW_ERR_DMA_ABORT";
    case 1204: return "NRT_EXEC_SW_NQ_OVERFLOW";
    case 1205: return "NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE";
    case 1206: return "NRT_NETWORK_PROXY_FAILURE";
    default: return nullptr;
  }
}

}  // namespace nrtprof
