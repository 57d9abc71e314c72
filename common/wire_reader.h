// Protobuf's wire format read by hand, with no message object made: the daemon's reader of a
// batch's events (daemon/wire_events.h) and the shim's look at the events it encoded
// (shim/backend/batcher.cc). Header only; no allocation.
//
// A tag is read as protobuf reads it: at most five bytes, the bits past 32 dropped. Groups are
// not skipped (Tag declines them; RawTag returns them for a caller that walks them itself).
#ifndef NRTPROF_COMMON_WIRE_READER_H_
#define NRTPROF_COMMON_WIRE_READER_H_

#include <cstddef>
#include <cstdint>

namespace nrtprof {

// Protobuf's wire types (the low three bits of a tag).
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5
};

class WireReader {
 public:
  WireReader(const char* begin, const char* end) : p_(begin), end_(end) {}
  bool done() const { return p_ == end_; }
  const char* at() const { return p_; }

  // A varint of at most `max_bytes` bytes (protobuf reads tags of at most 5, values of 10).
  bool Varint(uint64_t* v, int max_bytes = 10) {
    if (p_ != end_ && static_cast<uint8_t>(*p_) < 0x80) {  // most fields are one byte
      *v = static_cast<uint8_t>(*p_++);
      return true;
    }
    uint64_t result = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (p_ == end_) return false;
      const uint8_t b = static_cast<uint8_t>(*p_++);
      result |= uint64_t{b & 0x7fu} << (7 * i);
      if (b < 0x80) {
        *v = result;
        return true;
      }
    }
    return false;
  }

  // A tag: its field number and wire type. Declines what protobuf would not take as a field
  // (number 0, end of a group) and groups, which this reader does not skip. A tag is read as
  // protobuf reads it: at most five bytes, the bits past 32 dropped (a fifth byte above 0x0f
  // names a field as its low bits do, rather than no field).
  bool Tag(uint32_t* field, uint32_t* type) {
    uint64_t tag = 0;
    if (!Varint(&tag, 5)) return false;
    *field = static_cast<uint32_t>(tag) >> 3;
    *type = static_cast<uint32_t>(tag & 7);
    return *field != 0 && (*type == kVarint || *type == kFixed64 || *type == kLengthDelimited ||
                           *type == kFixed32);
  }

  // A tag as it is, groups' wire types included (read as Tag reads it).
  bool RawTag(uint32_t* field, uint32_t* type) {
    uint64_t tag = 0;
    if (!Varint(&tag, 5)) return false;
    *field = static_cast<uint32_t>(tag) >> 3;
    *type = static_cast<uint32_t>(tag & 7);
    return *field != 0;
  }

  // The bytes of a length-delimited field.
  bool Bytes(const char** begin, const char** end) {
    uint64_t n = 0;
    if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    *begin = p_;
    p_ += n;
    *end = p_;
    return true;
  }

  bool Skip(uint32_t type) {
    uint64_t unused = 0;
    const char* b = nullptr;
    const char* e = nullptr;
    switch (type) {
      case kVarint:
        return Varint(&unused);
      case kFixed64:
        return Advance(8);
      case kLengthDelimited:
        return Bytes(&b, &e);
      case kFixed32:
        return Advance(4);
      default:
        return false;
    }
  }

 private:
  bool Advance(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return false;
    p_ += n;
    return true;
  }

  const char* p_;
  const char* end_;
};

}  // namespace nrtprof

#endif  // NRTPROF_COMMON_WIRE_READER_H_
