#include "shim/backend/torch_loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "shim/torch/torch_lane_api.h"

namespace nrtprof::shim {
namespace {

enum class LaneState { kLooking, kLoaded, kGivenUp };

std::mutex g_mu;
LaneState g_state = LaneState::kLooking;  // guarded by g_mu
unsigned long long g_seen_adds = ~0ull;   // dlpi_adds at the last scan; guarded by g_mu
const TorchLaneApi* g_api = nullptr;      // guarded by g_mu
int g_enabled = 1;                        // what the lane was last told; guarded by g_mu

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// A libtorch object: libtorch_cpu.so* or libc10.so*.
bool IsTorchLibrary(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return StartsWith(base, "libtorch_cpu.so") || StartsWith(base, "libc10.so");
}

int ReadAdds(struct dl_phdr_info* info, size_t size, void* data) {
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs)) {
    *static_cast<unsigned long long*>(data) = info->dlpi_adds;
  }
  return 1;  // the first object says it
}

int FindTorch(struct dl_phdr_info* info, size_t /*size*/, void* data) {
  if (info->dlpi_name == nullptr || !IsTorchLibrary(info->dlpi_name)) return 0;
  *static_cast<std::string*>(data) = info->dlpi_name;
  return 1;
}

void Say(CoreState* core, const std::string& line) { core->say_notice(line.c_str()); }

// The core's folder (where the backend and the lane sit) and the core's own handle.
bool CoreFolder(CoreState* core, std::string* folder, std::string* core_path) {
  Dl_info info;
  if (dladdr(core, &info) == 0 || info.dli_fname == nullptr) return false;
  *core_path = info.dli_fname;
  const size_t slash = core_path->rfind('/');
  *folder = slash == std::string::npos ? "" : core_path->substr(0, slash + 1);
  return true;
}

// Loads and starts the lane; the state it ends in.
LaneState Load(CoreState* core, const std::string& torch_path) {
  std::string folder, core_path;
  if (!CoreFolder(core, &folder, &core_path)) return LaneState::kGivenUp;
  const std::string lane_path = folder + kTorchLaneLibraryName;
  if (access(lane_path.c_str(), R_OK) != 0) {
    Say(core, "nrtprof: PyTorch is loaded (" + torch_path + ") but this nrtprof has no PyTorch " +
                  "lane (" + lane_path + ": built without a libtorch); its ops are not recorded\n");
    return LaneState::kGivenUp;
  }
  // The lane must bind to the libtorch the process has: each libtorch/libc10 it needs must be
  // loaded under that name already, or its dlopen would bring another libtorch in.
  std::vector<std::string> needed;
  if (!ReadNeededLibraries(lane_path, &needed)) {
    Say(core, "nrtprof: cannot read " + lane_path + "; PyTorch's ops are not recorded\n");
    return LaneState::kGivenUp;
  }
  for (const std::string& name : needed) {
    if (!StartsWith(name, "libtorch") && !StartsWith(name, "libc10")) continue;
    void* handle = dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) {
      Say(core, "nrtprof: this process's PyTorch (" + torch_path + ") is not the one " +
                    kTorchLaneLibraryName + " was built against (it needs " + name +
                    "); its ops are not recorded\n");
      return LaneState::kGivenUp;
    }
    dlclose(handle);
  }
  void* handle = dlopen(lane_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (handle == nullptr) {
    const char* error = dlerror();
    Say(core, "nrtprof: cannot load " + lane_path + " (" +
                  (error != nullptr ? error : "unknown error") +
                  "); PyTorch's ops are not recorded\n");
    return LaneState::kGivenUp;
  }
  auto start = reinterpret_cast<TorchLaneStartFn>(core->real_dlsym(handle, kTorchLaneStartSymbol));
  // The core's own annotation entry points (not a same-named function of the program's).
  void* core_handle = dlopen(core_path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  TorchLaneHooks hooks{};
  hooks.abi_version = kTorchLaneAbiVersion;
  if (core_handle != nullptr) {
    hooks.range_push = reinterpret_cast<void (*)(const char*)>(
        core->real_dlsym(core_handle, "nrtprof_range_push"));
    hooks.range_pop = reinterpret_cast<void (*)()>(core->real_dlsym(core_handle, "nrtprof_range_pop"));
    dlclose(core_handle);
  }
  hooks.say_notice = core->say_notice;
  if (start == nullptr || hooks.range_push == nullptr || hooks.range_pop == nullptr) {
    Say(core, "nrtprof: " + lane_path + " is not the PyTorch lane of this nrtprof; PyTorch's " +
                  "ops are not recorded\n");
    return LaneState::kGivenUp;
  }
  const TorchLaneApi* api = start(&hooks);
  if (api == nullptr || api->abi_version != kTorchLaneAbiVersion) {
    if (api != nullptr) {
      Say(core, "nrtprof: " + lane_path + " is not the PyTorch lane of this nrtprof; " +
                    "PyTorch's ops are not recorded\n");
    }
    return LaneState::kGivenUp;  // (the lane said why)
  }
  g_api = api;
  g_enabled = 1;
  return LaneState::kLoaded;
}

}  // namespace

bool ReadNeededLibraries(const std::string& path, std::vector<std::string>* needed) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fits = [&](uint64_t offset, uint64_t size) {
    return offset <= file.size() && size <= file.size() - offset;
  };
  Elf64_Ehdr eh;
  if (!fits(0, sizeof(eh))) return false;
  memcpy(&eh, file.data(), sizeof(eh));
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !fits(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
    return false;
  }
  auto section = [&](uint32_t i) {
    Elf64_Shdr sh;
    memcpy(&sh, file.data() + eh.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr), sizeof(sh));
    return sh;
  };
  needed->clear();
  for (uint32_t i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr dynamic = section(i);
    if (dynamic.sh_type != SHT_DYNAMIC) continue;
    if (dynamic.sh_link >= eh.e_shnum || !fits(dynamic.sh_offset, dynamic.sh_size)) return false;
    const Elf64_Shdr strings = section(dynamic.sh_link);
    if (!fits(strings.sh_offset, strings.sh_size)) return false;
    for (uint64_t at = 0; at + sizeof(Elf64_Dyn) <= dynamic.sh_size; at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      memcpy(&d, file.data() + dynamic.sh_offset + at, sizeof(d));
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED || d.d_un.d_val >= strings.sh_size) continue;
      const char* name = file.data() + strings.sh_offset + d.d_un.d_val;
      needed->emplace_back(name, strnlen(name, strings.sh_size - d.d_un.d_val));
    }
    return true;
  }
  return false;
}

void PollTorchLane(CoreState* core) {
  std::unique_lock<std::mutex> lock(g_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  try {
    if (g_state == LaneState::kLooking) {
      unsigned long long adds = 0;
      dl_iterate_phdr(&ReadAdds, &adds);
      if (adds == g_seen_adds) return;
      g_seen_adds = adds;
      std::string torch_path;
      dl_iterate_phdr(&FindTorch, &torch_path);
      if (torch_path.empty()) return;
      g_state = Load(core, torch_path);
    }
    if (g_state == LaneState::kLoaded) {
      const int recording = core->recording.load(std::memory_order_relaxed) != 0 ? 1 : 0;
      if (recording != g_enabled) {
        g_api->set_enabled(recording);
        g_enabled = recording;
      }
    }
  } catch (const std::exception&) {
    // Out of memory: tried again at the next tick.
  }
}

}  // namespace nrtprof::shim
