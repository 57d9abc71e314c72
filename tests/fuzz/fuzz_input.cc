#include "tests/fuzz/fuzz_input.h"

namespace nrtprof::fuzz {

std::vector<FuzzRecord> SplitRecords(absl::string_view input) {
  std::vector<FuzzRecord> records;
  size_t pos = 0;
  while (pos < input.size()) {
    FuzzRecord r;
    const uint8_t op = static_cast<uint8_t>(input[pos++]);
    r.stream = op & kStreamMask;
    r.close_after = (op & kCloseAfter) != 0;
    r.status_after = (op & kStatusAfter) != 0;
    uint64_t length = 0;
    int shift = 0;
    bool length_done = false;
    while (pos < input.size() && shift < 64) {
      const uint8_t b = static_cast<uint8_t>(input[pos++]);
      length |= static_cast<uint64_t>(b & 0x7f) << shift;
      shift += 7;
      if ((b & 0x80) == 0) {
        length_done = true;
        break;
      }
    }
    if (!length_done || length > input.size() - pos) {
      r.truncated = true;
      r.message = input.substr(pos);
      records.push_back(r);
      break;
    }
    r.message = input.substr(pos, length);
    pos += length;
    records.push_back(r);
  }
  return records;
}

void AppendRecord(uint8_t op, absl::string_view message, std::string* out) {
  out->push_back(static_cast<char>(op));
  uint64_t length = message.size();
  do {
    uint8_t b = length & 0x7f;
    length >>= 7;
    if (length != 0) b |= 0x80;
    out->push_back(static_cast<char>(b));
  } while (length != 0);
  out->append(message.data(), message.size());
}

}  // namespace nrtprof::fuzz
