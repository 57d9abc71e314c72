// A recorded batch's events read straight from its wire bytes into IngestedEvents.
//
// A capture of the past decodes every batch the flight recorder kept, and protobuf's parse of
// an Event (a message on an arena, then copied field by field into a record) was the largest
// single cost of that decode. Events are flat messages of varints, so reading their fields
// into the record directly takes a fraction of the time. Everything else in the batch (strings,
// stacks, counters, clock samples: few bytes) is still parsed by protobuf.
//
// This reader declines what it does not take apart itself -- groups, a field number 0, a
// message that is not a batch or names its batch twice, anything truncated -- and the caller
// then parses the bytes with protobuf as before (ToRecord), so the result never depends on
// which path read a batch. wire_events_test.cc holds the two to the same records on real and
// corrupted batches.
#ifndef NRTPROF_DAEMON_WIRE_EVENTS_H_
#define NRTPROF_DAEMON_WIRE_EVENTS_H_

#include <string>
#include <string_view>
#include <vector>

#include "daemon/ingest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {

// Splits the serialized ShimMessage `wire`, which must hold an EventBatch: *rest takes the batch
// without its events, *events its events as ToRecord makes them, in order. *scratch holds the
// rest's bytes meanwhile (kept by the caller so that its buffer is reused). False, with *rest
// and *events unspecified, when the bytes must be parsed by protobuf instead (see above).
bool ReadWireBatch(std::string_view wire, nrtprof::EventBatch* rest,
                   std::vector<IngestedEvent>* events, std::string* scratch);

// How many fields the Hello and the batch in the serialized ShimMessage `wire` hold (each event,
// string, stack... one; unknown groups' fields too), counted without reading them: what parsing
// it would make objects of. A field of a few bytes becomes a record or message of a hundred or
// more, so a message of tiny fields must be refused before it is read. False if protobuf could
// not parse the message either.
bool CountWireElements(std::string_view wire, uint64_t* elements);

}  // namespace nrtprof::daemon

#endif  // NRTPROF_DAEMON_WIRE_EVENTS_H_
