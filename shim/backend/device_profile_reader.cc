#include "shim/backend/device_profile_reader.h"

#include <algorithm>

#include "shim/backend/json_scanner.h"

namespace nrtprof::shim {
namespace {

constexpr uint64_t kMaxNeuronCores = 4096;  // the wire's cores: 0 to 4095

class Reader : public JsonScanner {
 public:
  Reader(std::string_view text, DeviceProfileReadStats* stats)
      : JsonScanner(text), stats_(stats) {}

  bool Document(absl::FunctionRef<void(const DeviceProfileEntry&)> on_entry) {
    SkipSpace();
    if (!Consume('{')) return Fail("the profile is not a JSON object");
    bool model = false, core = false, executions = false;
    if (!Members([&](std::string_view key) {
          if (key == "model") {
            model = true;
            return Text(&entry_.model, &model_, "model");
          }
          if (key == "nc_idx") {
            core = true;
            uint64_t nc = 0;
            if (!Unsigned(&nc, "nc_idx")) return false;
            if (nc >= kMaxNeuronCores) return Fail("nc_idx out of range");
            entry_.nc_idx = static_cast<uint32_t>(nc);
            return true;
          }
          if (key == "model_id") {
            uint64_t ignored = 0;
            return Unsigned(&ignored, "model_id");
          }
          if (key == "executions") {
            // Each op is handed out as it is read, so what names it must come first (the
            // simulator writes it so).
            if (!model || !core) return Fail("executions before model and nc_idx");
            executions = true;
            if (!Consume('[')) return Fail("executions is not an array");
            return Items("executions", [&] { return Execution(on_entry); });
          }
          ++stats_->unknown_members;
          return SkipValue(1);
        })) {
      return false;
    }
    if (!End()) return false;
    if (!executions) return Fail("no executions array");
    return true;
  }

 private:
  // A string member, kept apart from the scratch copy a later string would reuse.
  bool Text(std::string_view* out, std::string* keep, const char* what) {
    if (Peek() != '"' || !String(out)) return Fail(std::string(what) + " is not a string");
    if (InScratch(*out)) {
      keep->assign(*out);
      *out = *keep;
    }
    return true;
  }

  bool Execution(absl::FunctionRef<void(const DeviceProfileEntry&)> on_entry) {
    if (!Consume('{')) return Fail("an execution is not an object");
    bool id = false, ops = false, dma = false;
    uint64_t ignored = 0;
    const bool ok = Members([&](std::string_view key) {
      if (key == "exec_id") {
        id = true;
        return Unsigned(&entry_.exec_id, "exec_id");
      }
      if (key == "start_ns" || key == "duration_ns") return Unsigned(&ignored, "an execution's time");
      if (key == "ops" || key == "dma") {
        if (!id) return Fail("an execution's ops before its exec_id");
        const bool is_ops = key == "ops";
        (is_ops ? ops : dma) = true;
        if (!Consume('[')) return Fail(is_ops ? "ops is not an array" : "dma is not an array");
        const DeviceProfileEntry::Kind kind =
            is_ops ? DeviceProfileEntry::Kind::kOp : DeviceProfileEntry::Kind::kDma;
        return Items(is_ops ? "ops" : "dma", [&] { return Entry(kind, on_entry); });
      }
      ++stats_->unknown_members;
      return SkipValue(3);
    });
    if (!ok) return false;
    if (!id || !ops || !dma) return Fail("an execution lacks exec_id, ops or dma");
    ++stats_->executions;
    return true;
  }

  bool Entry(DeviceProfileEntry::Kind kind,
             absl::FunctionRef<void(const DeviceProfileEntry&)> on_entry) {
    const bool op = kind == DeviceProfileEntry::Kind::kOp;
    if (!Consume('{')) return Fail(op ? "an op is not an object" : "a transfer is not an object");
    DeviceProfileEntry& e = entry_;
    e.kind = kind;
    e.name = e.engine = e.tensor = {};
    e.bytes = e.start_ns = e.duration_ns = 0;
    enum : uint32_t { kName = 1, kEngine = 2, kTensor = 4, kBytes = 8, kStart = 16, kDuration = 32 };
    uint32_t seen = 0;
    const bool ok = Members([&](std::string_view key) {
      if (key == "name") {
        seen |= kName;
        return Text(&e.name, &name_, "name");
      }
      if (key == "start_ns") {
        seen |= kStart;
        return Unsigned(&e.start_ns, "start_ns");
      }
      if (key == "duration_ns") {
        seen |= kDuration;
        return Unsigned(&e.duration_ns, "duration_ns");
      }
      if (op && key == "engine") {
        seen |= kEngine;
        return Text(&e.engine, &engine_, "engine");
      }
      if (!op && key == "tensor") {
        seen |= kTensor;
        return Text(&e.tensor, &tensor_, "tensor");
      }
      if (!op && key == "bytes") {
        seen |= kBytes;
        return Unsigned(&e.bytes, "bytes");
      }
      ++stats_->unknown_members;
      return SkipValue(5);
    });
    if (!ok) return false;
    const uint32_t required =
        kName | kStart | kDuration | (op ? kEngine : static_cast<uint32_t>(kTensor | kBytes));
    if ((seen & required) != required) {
      return Fail(op ? "an op lacks name, engine, start_ns or duration_ns"
                     : "a transfer lacks name, tensor, bytes, start_ns or duration_ns");
    }
    if (e.name.empty()) return Fail(op ? "an op without a name" : "a transfer without a name");
    ++stats_->entries;
    on_entry(e);
    return true;
  }

  DeviceProfileReadStats* const stats_;
  DeviceProfileEntry entry_;  // the document's model and core, and the entry being read
  std::string model_, name_, engine_, tensor_;  // strings that had escapes
};

}  // namespace

bool LooksLikeJson(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

bool ReadDeviceProfile(std::string_view json,
                       absl::FunctionRef<void(const DeviceProfileEntry&)> on_entry,
                       DeviceProfileReadStats* stats, std::string* error) {
  Reader reader(json, stats);
  if (reader.Document(on_entry)) return true;
  *error = reader.error();
  return false;
}

uint64_t CountProfileEntries(std::string_view text) {
  // Each op has an engine and each transfer a tensor; executions have neither.
  uint64_t n = 0;
  for (std::string_view key : {"\"engine\"", "\"tensor\""}) {
    for (size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1)) {
      ++n;
    }
  }
  return std::max<uint64_t>(n, 1);
}

}  // namespace nrtprof::shim
