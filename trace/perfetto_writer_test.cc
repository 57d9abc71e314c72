#include "trace/perfetto_writer.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trace/async_requests.h"
#include "trace/chrome_json_writer.h"
#include "trace/perfetto_trace_reader.h"
#include "trace/summary.h"
#include "trace/writer_test_util.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"
#include "proto/perfetto_trace.pb.h"

namespace nrtprof::daemon {
namespace {

using perfetto::protos::TracePacket;
using perfetto::protos::TrackEvent;

// Everything a user would see of a file, reconstructed the way a trace reader does it.
struct Slice {
  std::string name;
  uint64_t start = 0;
  uint64_t end = 0;
  size_t depth = 0;
  std::vector<uint64_t> flows;
  std::vector<uint64_t> terminating_flows;
  std::map<std::string, std::string> args;  // values as text
  std::string arg_list;  // name=value;... in the file's order
};

struct ReadBack {
  perfetto::protos::Trace trace;  // bundles expanded
  size_t bundles = 0;
  std::map<uint64_t, perfetto::protos::TrackDescriptor> tracks;
  std::map<uint64_t, std::vector<Slice>> slices;  // by track uuid, in begin order
  std::vector<std::pair<uint64_t, Slice>> instants;
  // Counter tracks' values, as the reader gives them: by track uuid, (time, value).
  std::map<uint64_t, std::vector<std::pair<uint64_t, int64_t>>> counters;
};

std::string ArgText(const perfetto::protos::DebugAnnotation& a) {
  if (a.has_string_value()) return a.string_value();
  if (a.has_uint_value()) return std::to_string(a.uint_value());
  if (a.has_int_value()) return std::to_string(a.int_value());
  return "?";
}

void ExpectNoUnknownFields(const google::protobuf::Message& m, const std::string& where) {
  const auto* reflection = m.GetReflection();
  EXPECT_TRUE(reflection->GetUnknownFields(m).empty()) << "unknown fields in " << where;
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(m, &fields);
  for (const auto* f : fields) {
    if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(m, f); ++i) {
        ExpectNoUnknownFields(reflection->GetRepeatedMessage(m, f, i), where + "." + f->name());
      }
    } else {
      ExpectNoUnknownFields(reflection->GetMessage(m, f), where + "." + f->name());
    }
  }
}

ReadBack Read(const std::string& bytes) {
  ReadBack r;
  absl::StatusOr<ReadTrace> read = ReadPerfettoTrace(bytes);
  EXPECT_TRUE(read.ok()) << read.status();
  if (!read.ok()) return r;
  r.trace = std::move(read->trace);
  r.bundles = read->bundles;
  r.counters = read->counters;
  const std::vector<uint64_t>& times = read->times;  // MONOTONIC ns, through the clocks
  // Interned names as Perfetto keeps them: per sequence, from the packet that clears the
  // sequence's state. The writer also gives one text the same iid in every sequence.
  struct Interned {
    std::map<uint64_t, std::string> names, arg_names;
  };
  std::map<uint32_t, Interned> by_sequence;
  std::map<uint64_t, std::string> all_names, all_arg_names;
  std::map<uint64_t, std::vector<Slice>> open;
  std::map<uint64_t, uint64_t> last_ts;
  uint32_t sequence = 0;
  for (int i = 0; i < r.trace.packet_size(); ++i) {
    const TracePacket& p = r.trace.packet(i);
    const uint64_t ts = times[i];
    ExpectNoUnknownFields(p, absl::StrCat("packet ", i));
    // Sequences come one after another, kSequenceId first; each begins by clearing its state.
    const bool begins = p.trusted_packet_sequence_id() != sequence;
    if (begins) {
      EXPECT_EQ(p.trusted_packet_sequence_id(), sequence == 0 ? PerfettoWriter::kSequenceId
                                                              : sequence + 1);
      EXPECT_EQ(by_sequence.count(p.trusted_packet_sequence_id()), 0u) << "a sequence came back";
      sequence = p.trusted_packet_sequence_id();
    }
    EXPECT_EQ(p.sequence_flags(), begins ? TracePacket::SEQ_INCREMENTAL_STATE_CLEARED
                                         : TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
    std::map<uint64_t, std::string>& names = by_sequence[sequence].names;
    std::map<uint64_t, std::string>& arg_names = by_sequence[sequence].arg_names;
    for (const auto& n : p.interned_data().event_names()) {
      EXPECT_TRUE(names.emplace(n.iid(), n.name()).second) << "iid redefined: " << n.iid();
      EXPECT_EQ(all_names.emplace(n.iid(), n.name()).first->second, n.name())
          << "iid " << n.iid() << " names two texts";
    }
    for (const auto& n : p.interned_data().debug_annotation_names()) {
      EXPECT_TRUE(arg_names.emplace(n.iid(), n.name()).second);
      EXPECT_EQ(all_arg_names.emplace(n.iid(), n.name()).first->second, n.name());
    }
    if (p.has_track_descriptor()) {
      r.tracks[p.track_descriptor().uuid()] = p.track_descriptor();
      EXPECT_FALSE(p.has_timestamp());
    }
    if (!p.has_track_event()) continue;
    const TrackEvent& e = p.track_event();
    uint64_t track = e.track_uuid();
    EXPECT_TRUE(r.tracks.count(track)) << "event before its track descriptor";
    EXPECT_GE(ts, last_ts[track]) << "events out of order on track " << track;
    last_ts[track] = ts;
    Slice s;
    if (e.type() != TrackEvent::TYPE_SLICE_END && e.type() != TrackEvent::TYPE_COUNTER) {
      EXPECT_TRUE(e.has_name_iid());
      EXPECT_TRUE(names.count(e.name_iid())) << "name used before it was interned";
      s.name = names[e.name_iid()];
      s.start = ts;
      s.flows.assign(e.flow_ids().begin(), e.flow_ids().end());
      s.terminating_flows.assign(e.terminating_flow_ids().begin(), e.terminating_flow_ids().end());
      for (const auto& a : e.debug_annotations()) {
        EXPECT_TRUE(arg_names.count(a.name_iid()));
        s.args[arg_names[a.name_iid()]] = ArgText(a);
        absl::StrAppend(&s.arg_list, arg_names[a.name_iid()], "=", ArgText(a), ";");
      }
    }
    switch (e.type()) {
      case TrackEvent::TYPE_SLICE_BEGIN:
        s.depth = open[track].size();
        open[track].push_back(s);
        break;
      case TrackEvent::TYPE_SLICE_END: {
        auto& stack = open[track];
        EXPECT_FALSE(stack.empty()) << "SLICE_END with no open slice on track " << track;
        if (stack.empty()) break;
        Slice done = stack.back();
        stack.pop_back();
        done.end = ts;
        r.slices[track].push_back(done);
        break;
      }
      case TrackEvent::TYPE_INSTANT:
        r.instants.push_back({track, s});
        break;
      case TrackEvent::TYPE_COUNTER:
        EXPECT_TRUE(r.tracks[track].has_counter()) << "a value on track " << track;
        break;
      default:
        ADD_FAILURE() << "unexpected event type " << e.type();
    }
  }
  for (const auto& [track, stack] : open) {
    EXPECT_TRUE(stack.empty()) << stack.size() << " slices never end on track " << track;
  }
  // Slices were collected in end order; put them in begin order.
  for (auto& [track, list] : r.slices) {
    std::stable_sort(list.begin(), list.end(), [](const Slice& a, const Slice& b) {
      return a.start != b.start ? a.start < b.start : a.depth < b.depth;
    });
  }
  return r;
}

std::vector<uint64_t> ChildrenOf(const ReadBack& r, uint64_t parent) {
  std::vector<uint64_t> children;
  for (const auto& [uuid, t] : r.tracks) {
    if (t.parent_uuid() == parent) children.push_back(uuid);
  }
  return children;
}

uint64_t ChildNamed(const ReadBack& r, uint64_t parent, const std::string& name) {
  for (uint64_t uuid : ChildrenOf(r, parent)) {
    if (r.tracks.at(uuid).name() == name) return uuid;
  }
  ADD_FAILURE() << "no track '" << name << "' under " << parent;
  return 0;
}

const Slice* Find(const ReadBack& r, uint64_t track, const std::string& name) {
  auto it = r.slices.find(track);
  if (it == r.slices.end()) return nullptr;
  for (const Slice& s : it->second) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

ReadBack WriteAndRead(const Trace& t, const std::string& dir_name,
                      PerfettoWriter::Options options = {}) {
  std::string dir = TempDir(dir_name);
  std::vector<std::string> files;
  absl::Status s = PerfettoWriter(options).Write(t, ComputeSummary(t), dir, &files);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(files, std::vector<std::string>{"trace.pftrace"});
  return Read(ReadFile(dir + "/trace.pftrace"));
}

TEST(PerfettoWriterTest, TrackTreeHasTheThreeLanes) {
  ReadBack r = WriteAndRead(SmallTrace(), "tree");
  uint64_t process = 0;
  for (const auto& [uuid, t] : r.tracks) {
    if (t.has_process()) process = uuid;
  }
  ASSERT_NE(process, 0u);
  const auto& pd = r.tracks[process].process();
  EXPECT_EQ(pd.pid(), 100);
  EXPECT_EQ(pd.process_name(), "python3");
  EXPECT_EQ(std::vector<std::string>(pd.cmdline().begin(), pd.cmdline().end()),
            (std::vector<std::string>{"python3", "train.py", "--steps=1"}));

  std::map<int, uint64_t> threads;
  std::set<std::string> under_process;
  for (uint64_t uuid : ChildrenOf(r, process)) {
    const auto& t = r.tracks[uuid];
    if (t.has_thread()) {
      EXPECT_EQ(t.thread().pid(), 100);
      threads[t.thread().tid()] = uuid;
    } else {
      under_process.insert(t.name());
    }
  }
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(r.tracks[threads[101]].thread().thread_name(), "MainThread");
  EXPECT_EQ(r.tracks[threads[102]].thread().thread_name(), "loader");
  EXPECT_EQ(under_process, std::set<std::string>{"NeuronCore 0"});
  for (const auto& [tid, uuid] : threads) {
    std::set<std::string> lanes;
    for (uint64_t c : ChildrenOf(r, uuid)) lanes.insert(r.tracks[c].name());
    EXPECT_EQ(lanes, (std::set<std::string>{"framework", "runtime"})) << "thread " << tid;
  }
  uint64_t core = ChildNamed(r, process, "NeuronCore 0");
  std::set<std::string> core_lanes;
  for (uint64_t c : ChildrenOf(r, core)) core_lanes.insert(r.tracks[c].name());
  EXPECT_EQ(core_lanes, (std::set<std::string>{"executions", "DMA"}));
}

TEST(PerfettoWriterTest, SlicesNestAndCarryTheirArguments) {
  ReadBack r = WriteAndRead(SmallTrace(), "slices");
  uint64_t process = r.tracks.begin()->first;
  uint64_t main_thread = 0;
  for (uint64_t uuid : ChildrenOf(r, process)) {
    if (r.tracks[uuid].has_thread() && r.tracks[uuid].thread().tid() == 101) main_thread = uuid;
  }
  uint64_t framework = ChildNamed(r, main_thread, "framework");
  uint64_t runtime = ChildNamed(r, main_thread, "runtime");
  uint64_t core = ChildNamed(r, process, "NeuronCore 0");
  uint64_t executions = ChildNamed(r, core, "executions");
  uint64_t dma = ChildNamed(r, core, "DMA");

  const Slice* forward = Find(r, framework, "forward");
  const Slice* mul_range = Find(r, framework, "aten::mul");
  ASSERT_TRUE(forward && mul_range);
  EXPECT_EQ(forward->depth, 0u);
  EXPECT_EQ(mul_range->depth, 1u);
  EXPECT_EQ(mul_range->start, 1100u);
  EXPECT_EQ(mul_range->end, 1500u);

  const Slice* call = Find(r, runtime, "nrt_execute");
  ASSERT_TRUE(call);
  EXPECT_EQ(call->start, 1200u);
  EXPECT_EQ(call->end, 1400u);
  EXPECT_EQ(call->args.at("status"), "0");
  EXPECT_EQ(call->args.at("model"), "mlp");
  EXPECT_EQ(call->args.at("correlation_id"), "10");
  EXPECT_EQ(call->args.at("stack"), "nrt_execute <- torch_neuronx::run <- main");

  const Slice* run = Find(r, executions, "nc_exec_running");
  const Slice* mul = Find(r, executions, "mul");
  const Slice* add = Find(r, executions, "add");
  ASSERT_TRUE(run && mul && add);
  EXPECT_EQ(run->depth, 0u);
  EXPECT_EQ(mul->depth, 1u);
  EXPECT_EQ(add->depth, 1u);
  EXPECT_EQ(add->end, 1390u) << "an op outlasting its execution is clamped into it";
  EXPECT_EQ(run->args.at("exec_id"), "7");
  EXPECT_EQ(mul->args.at("engine"), "vector");

  const Slice* h2d = Find(r, dma, "dma_h2d");
  ASSERT_TRUE(h2d);
  EXPECT_EQ(h2d->args.at("bytes"), "4096");
  EXPECT_EQ(h2d->args.at("tensor"), "input");
}

// Each slice drawn, as "name@start: arguments in order", from the file or from the lanes.
std::multiset<std::string> SlicesWithArgs(const ReadBack& r) {
  std::multiset<std::string> out;
  for (const auto& [track, slices] : r.slices) {
    for (const Slice& s : slices) out.insert(absl::StrCat(s.name, "@", s.start, ": ", s.arg_list));
  }
  return out;
}

std::multiset<std::string> SlicesWithArgs(const TraceLanes& lanes) {
  std::multiset<std::string> out;
  std::vector<SliceArg> args;
  std::string text;
  auto add = [&](const Lane& lane) {
    for (const LaneSlice& slice : lane.slices) {
      SliceArgs(slice, &args, &text);
      std::string line = absl::StrCat(slice.name.str(), "@", slice.start_ns, ": ");
      for (const SliceArg& a : args) {
        absl::StrAppend(&line, a.name, "=");
        switch (a.type) {
          case SliceArg::Type::kString:
            line.append(a.string_value);
            break;
          case SliceArg::Type::kUint:
            absl::StrAppend(&line, a.uint_value);
            break;
          case SliceArg::Type::kInt:
            absl::StrAppend(&line, a.int_value);
            break;
        }
        absl::StrAppend(&line, ";");
      }
      out.insert(line);
    }
  };
  for (const ProcessLanes& p : lanes.processes) {
    for (const ThreadLanes& t : p.threads) {
      add(t.framework);
      add(t.runtime);
    }
    for (const CoreLanes& c : p.cores) {
      add(c.executions);
      add(c.dma);
      for (const Lane& queue : c.queues) add(queue);
    }
  }
  return out;
}

// The writer puts each slice's arguments in the file itself, not through SliceArgs (the
// layout's own list, which trace.json writes): the two must say the same, in the same order,
// for every kind of slice. Overlapping transfers add the arguments of a slice moved to nest.
TEST(PerfettoWriterTest, EverySlicesArgumentsAreSliceArgs) {
  Trace overlapping = SmallTrace();
  ProcessTrace& p = overlapping.processes[0];
  DeviceEvent dma;
  for (const DeviceEvent& e : p.device) {
    if (e.kind == DeviceEventKind::kDma) dma = e;
  }
  ASSERT_NE(dma.id, 0u);
  dma.id = 9001;
  dma.start_ns += dma.duration_ns / 2;  // inside the other: its start moves to the other's end
  dma.exec_id = 0;
  dma.tensor_name = Name();
  p.device.push_back(dma);
  ApiCall& call = p.calls[0];
  call.nrta_seq = (uint64_t{3} << kNrtaQueueShift) | 17;
  call.status = -4;
  call.stack.push_back("");  // an empty frame is still joined
  int traces = 0;
  std::set<std::string> names_seen;
  for (const Trace& t : {SmallTrace(), AsyncTrace(), CollectivesTrace(), overlapping}) {
    SCOPED_TRACE(++traces);
    const ReadBack r = WriteAndRead(t, absl::StrCat("slice_args_", traces));
    const std::multiset<std::string> expected = SlicesWithArgs(BuildLanes(t));
    EXPECT_EQ(SlicesWithArgs(r), expected);
    for (const auto& [track, slices] : r.slices) {
      for (const Slice& s : slices) {
        for (const auto& [name, value] : s.args) names_seen.insert(name);
      }
    }
  }
  // What the traces above cover: each argument SliceArgs may give.
  for (const char* name :
       {"status", "correlation_id", "bytes", "model", "tensor", "nc", "repeat", "nrta_seq",
        "queue", "seq", "polls", "stack", "collective", "worker_gid", "exec_id", "engine",
        "submitting_tid", "queue_wait_ns", "duration_ns", "start_moved_ns"}) {
    EXPECT_TRUE(names_seen.count(name)) << name;
  }
}

TEST(PerfettoWriterTest, FlowsRunFromFrameworkThroughRuntimeToHardware) {
  ReadBack r = WriteAndRead(SmallTrace(), "flows");
  std::map<std::string, const Slice*> by_name;
  for (const auto& [track, list] : r.slices) {
    for (const Slice& s : list) by_name[s.name] = &s;
  }
  const Slice* range = by_name["aten::mul"];
  const Slice* call = by_name["nrt_execute"];
  const Slice* run = by_name["nc_exec_running"];
  ASSERT_TRUE(range && call && run);
  ASSERT_EQ(call->flows.size(), 1u);
  uint64_t flow = call->flows[0];
  EXPECT_EQ(range->flows, std::vector<uint64_t>{flow});
  EXPECT_EQ(run->terminating_flows, std::vector<uint64_t>{flow});
  EXPECT_TRUE(by_name["mul"]->flows.empty()) << "engine ops are not flow steps";
  EXPECT_TRUE(by_name["forward"]->flows.empty()) << "only the innermost range starts a flow";

  // The tensor write's flow ends at its DMA, and is a different flow.
  const Slice* write = by_name["nrt_tensor_write"];
  const Slice* h2d = by_name["dma_h2d"];
  ASSERT_EQ(write->flows.size(), 1u);
  EXPECT_NE(write->flows[0], flow);
  EXPECT_EQ(h2d->terminating_flows, write->flows);
  EXPECT_EQ(by_name["load_batch"]->flows, write->flows);
}

// The async API's work: under its NeuronCore, a track per execution unit's queue with its
// slices and arguments, a counter of each queue's requests in flight, and the flows from the
// framework op through the schedule call to the work.
TEST(PerfettoWriterTest, AsyncQueuesHaveTracksCountersAndFlows) {
  ReadBack r = WriteAndRead(AsyncTrace(), "async");
  uint64_t process = 0;
  for (const auto& [uuid, t] : r.tracks) {
    if (t.has_process()) process = uuid;
  }
  const uint64_t core = ChildNamed(r, process, "NeuronCore 0");
  std::set<std::string> core_tracks;
  for (uint64_t c : ChildrenOf(r, core)) core_tracks.insert(r.tracks[c].name());
  EXPECT_EQ(core_tracks, (std::set<std::string>{"executions", "compute queue (XU 1)",
                                                "tensor-op queue (XU 2)",
                                                "requests in flight (XU 1)",
                                                "requests in flight (XU 2)"}));
  const uint64_t compute = ChildNamed(r, core, "compute queue (XU 1)");
  const uint64_t tensor_ops = ChildNamed(r, core, "tensor-op queue (XU 2)");
  ASSERT_EQ(r.slices[compute].size(), 4u);
  const Slice& second = r.slices[compute][2];
  EXPECT_EQ(second.start, 1500'000u);
  EXPECT_EQ(second.args.at("queue_wait_ns"), "250000");
  EXPECT_EQ(second.args.at("nrta_seq"), std::to_string(NrtaSeq(1, 2)));
  EXPECT_EQ(r.slices[compute][1].name, "matmul");
  EXPECT_EQ(r.slices[compute][1].depth, 1u);
  ASSERT_EQ(r.slices[tensor_ops].size(), 1u);
  EXPECT_EQ(r.slices[tensor_ops][0].args.at("queue_wait_ns"), "50000");

  // The counters, read back by the repo's reader: up to the queue's depth, back to 0.
  const uint64_t xu1 = ChildNamed(r, core, "requests in flight (XU 1)");
  EXPECT_TRUE(r.tracks[xu1].has_counter());
  std::vector<std::pair<uint64_t, int64_t>> values;
  for (auto [ts, v] : r.counters[xu1]) values.emplace_back(ts / 1000, v);
  EXPECT_EQ(values, (std::vector<std::pair<uint64_t, int64_t>>{{1150, 1},
                                                               {1250, 2},
                                                               {1350, 3},
                                                               {1500, 2},
                                                               {1800, 1},
                                                               {2100, 0},
                                                               {2650, 1},
                                                               {3000, 0}}));
  const uint64_t xu2 = ChildNamed(r, core, "requests in flight (XU 2)");
  EXPECT_EQ(r.counters[xu2],
            (std::vector<std::pair<uint64_t, int64_t>>{{1050'000, 1}, {1200'000, 0}}));

  // forward -> the schedule call -> its execution on the compute queue's track.
  std::map<uint64_t, const Slice*> schedule_by_id;
  const Slice* forward = nullptr;
  for (const auto& [track, list] : r.slices) {
    for (const Slice& sl : list) {
      if (sl.name == "forward") forward = &sl;
      if (sl.name == "nrta_execute_schedule") {
        schedule_by_id[std::stoull(sl.args.at("correlation_id"))] = &sl;
      }
    }
  }
  ASSERT_TRUE(forward != nullptr);
  ASSERT_EQ(schedule_by_id.size(), 4u);
  const Slice* schedule = schedule_by_id[22];
  EXPECT_EQ(schedule->args.at("queue"), "1");
  EXPECT_EQ(schedule->args.at("seq"), "2");
  ASSERT_EQ(schedule->flows.size(), 1u);
  EXPECT_NE(std::find(forward->flows.begin(), forward->flows.end(), schedule->flows[0]),
            forward->flows.end());
  EXPECT_EQ(second.terminating_flows, schedule->flows);
}

TEST(PerfettoWriterTest, CaptureIdAndDropCountersAreOnTheProcessTrack) {
  ReadBack r = WriteAndRead(SmallTrace(), "drops");
  ASSERT_EQ(r.instants.size(), 1u);
  const auto& [track, instant] = r.instants[0];
  EXPECT_TRUE(r.tracks[track].has_process());
  EXPECT_EQ(instant.name, "nrtprof capture");
  EXPECT_EQ(instant.start, 1000u);
  EXPECT_EQ(instant.args.at("capture_id"), "cap-42");
  EXPECT_EQ(instant.args.at("drops.total"), "3");
  EXPECT_EQ(instant.args.at("drops.ring_full"), "2");
  EXPECT_EQ(instant.args.at("drops.daemon_away"), "1");
  EXPECT_EQ(instant.args.at("drops.spool_full"), "0");
  EXPECT_EQ(instant.args.at("drops.device_overwritten"), "0");
  EXPECT_EQ(instant.args.at("drops.oversized"), "0");
  EXPECT_EQ(instant.args.at("events_received"), "9");
  EXPECT_EQ(instant.args.at("drops.no_clock_sync"), "0");
  EXPECT_EQ(instant.args.at("device_uncorrelated"), "0");
}

// A capture a trigger rule took (nrtprofd --trigger): the Perfetto user finds why on a track of
// its own, "nrtprof triggers", at the top of the timeline (no process: a global track), an
// instant where the anomaly began, named for the rule, the reason, value and threshold in its
// arguments; each process's capture instant names the rule too.
TEST(PerfettoWriterTest, ATriggeredCaptureHasTheAnomalysInstantOnATrackOfItsOwn) {
  Trace t = SmallTrace();
  t.trigger = {"slow-step", "slow-step: step > 3 x median",
               "pid 100 (python3): step 7 took 4.0x the median of the last 100 (800 ns vs 200 "
               "ns)",
               800, 600, 1100};
  ReadBack r = WriteAndRead(t, "trigger");
  std::vector<uint64_t> named;
  for (const auto& [uuid, track] : r.tracks) {
    if (track.name() == "nrtprof triggers") named.push_back(uuid);
  }
  ASSERT_EQ(named.size(), 1u);
  const perfetto::protos::TrackDescriptor& track = r.tracks.at(named[0]);
  EXPECT_FALSE(track.has_parent_uuid());
  EXPECT_FALSE(track.has_process());
  EXPECT_FALSE(track.has_thread());
  EXPECT_FALSE(r.slices.count(named[0])) << "only the instant is on it";
  std::vector<Slice> on_it, captures;
  for (const auto& [uuid, instant] : r.instants) {
    (uuid == named[0] ? on_it : captures).push_back(instant);
  }
  ASSERT_EQ(on_it.size(), 1u);
  EXPECT_EQ(on_it[0].name, "slow-step");
  EXPECT_EQ(on_it[0].start, 1100u) << "where the anomaly began";
  EXPECT_EQ(on_it[0].args,
            (std::map<std::string, std::string>{
                {"reason", t.trigger.reason},
                {"condition", "slow-step: step > 3 x median"},
                {"value_ns", "800"},
                {"threshold_ns", "600"},
                {"capture_id", "cap-42"}}));
  ASSERT_EQ(captures.size(), 1u);
  EXPECT_EQ(captures[0].name, "nrtprof capture");
  EXPECT_EQ(captures[0].args.at("trigger"), "slow-step");

  // Without the anomaly's time (asked by an older daemon): at the timeline's start.
  t.trigger.at_ns = 0;
  r = WriteAndRead(t, "trigger_no_time");
  bool found = false;
  for (const auto& [uuid, instant] : r.instants) {
    if (instant.name != "slow-step") continue;
    found = true;
    EXPECT_EQ(instant.start, 1000u);
  }
  EXPECT_TRUE(found);

  // A capture someone asked for has neither.
  r = WriteAndRead(SmallTrace(), "no_trigger");
  for (const auto& [uuid, track] : r.tracks) EXPECT_NE(track.name(), "nrtprof triggers");
  ASSERT_EQ(r.instants.size(), 1u);
  EXPECT_EQ(r.instants[0].second.args.count("trigger"), 0u);
}

TEST(PerfettoWriterTest, ClockSnapshotPutsTheFileOnMonotonicTime) {
  ReadBack r = WriteAndRead(SmallTrace(), "clock");
  const TracePacket& first = r.trace.packet(0);
  ASSERT_TRUE(first.has_clock_snapshot());
  EXPECT_TRUE(first.first_packet_on_sequence());
  EXPECT_EQ(first.clock_snapshot().primary_trace_clock(),
            perfetto::protos::BUILTIN_CLOCK_MONOTONIC);
  std::map<uint32_t, uint64_t> clocks;
  for (const auto& c : first.clock_snapshot().clocks()) clocks[c.clock_id()] = c.timestamp();
  EXPECT_EQ(clocks[3], 1000u);
  EXPECT_EQ(clocks[1], 1'700'000'000'000'001'000u);
}

TEST(PerfettoWriterTest, EqualTimestampsAndOverhangsStayWellNested) {
  Trace t;
  ProcessTrace p;
  p.pid = 7;
  // A parent and child with identical times, listed child first; a grandchild outlasting both;
  // two calls overlapping by clock noise.
  p.ranges.push_back({2, "child", 8, 100, 50, 1, 1});
  p.ranges.push_back({1, "parent", 8, 100, 50, 0, 0});
  p.ranges.push_back({3, "grandchild", 8, 120, 90, 2, 2});
  p.ranges.push_back({4, "next", 8, 150, 10, 0, 0});
  ApiCall a;
  a.correlation_id = 1;
  a.name = "first";
  a.tid = 8;
  a.start_ns = 100;
  a.duration_ns = 30;
  ApiCall b = a;
  b.correlation_id = 2;
  b.name = "second";
  b.start_ns = 125;
  p.calls = {a, b};
  t.processes.push_back(p);
  ReadBack r = WriteAndRead(t, "nesting");  // Read() checks every END matches a BEGIN
  std::map<std::string, Slice> by_name;
  for (const auto& [track, list] : r.slices) {
    for (const Slice& s : list) by_name[s.name] = s;
  }
  EXPECT_EQ(by_name["parent"].depth, 0u);
  EXPECT_EQ(by_name["child"].depth, 1u);
  EXPECT_EQ(by_name["grandchild"].depth, 2u);
  EXPECT_EQ(by_name["grandchild"].end, 150u);
  EXPECT_EQ(by_name["next"].depth, 0u);
  EXPECT_EQ(by_name["second"].depth, 0u);
  EXPECT_EQ(by_name["second"].start, 130u);
}

// `iterations` steps of a one-thread training loop: a framework range, its nrt_execute, the
// execution with two engine ops.
Trace ManyIterations(int iterations) {
  Trace t;
  t.capture_id = "size";
  ProcessTrace p;
  p.pid = 1;
  uint64_t ts = 1'000'000'000'000;
  uint64_t next_id = 1;
  for (int i = 0; i < iterations; ++i) {
    uint64_t range = next_id++;
    p.ranges.push_back({range, "aten::linear", 2, ts, 100'000, 0, 0});
    ApiCall c;
    c.correlation_id = i + 1;
    c.name = "nrt_execute";
    c.tid = 2;
    c.start_ns = ts + 1'000;
    c.duration_ns = 90'000;
    c.model_name = "mlp_layer";
    c.nc_idx = 0;
    c.repeat = 1;
    c.range = range;
    p.calls.push_back(c);
    DeviceEvent run;
    run.id = next_id++;
    run.name = "nc_exec_running";
    run.start_ns = ts + 5'000;
    run.duration_ns = 80'000;
    run.correlation_id = c.correlation_id;
    run.model_name = "mlp_layer";
    run.exec_id = i;
    p.device.push_back(run);
    for (int op = 0; op < 2; ++op) {
      DeviceEvent o = run;
      o.id = next_id++;
      o.kind = DeviceEventKind::kEngineOp;
      o.name = op == 0 ? Name("matmul") : Name("gelu");
      o.engine = op == 0 ? "tensor" : "scalar";
      o.parent = run.id;
      o.start_ns = ts + 10'000 + op * 30'000;
      o.duration_ns = 25'000;
      p.device.push_back(o);
    }
    ts += 200'000 + static_cast<uint64_t>(i % 7) * 13;
  }
  t.processes.push_back(p);
  return t;
}

size_t EventsOf(const Trace& t) {
  size_t n = 0;
  for (const ProcessTrace& p : t.processes) n += p.ranges.size() + p.calls.size() + p.device.size();
  return n;
}

// Records are top-level Trace.packet fields, compressed bundles or not: a file cut at any
// record boundary is a valid trace with every packet before the cut.
void ExpectEveryRecordBoundaryIsAValidTrace(const std::string& bytes, int* records) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(1 << 30);
  *records = 0;
  int packets = 0;
  while (in.CurrentPosition() < static_cast<int>(bytes.size())) {
    ASSERT_EQ(in.ReadTag(), 0x0au) << "every record is Trace.packet";
    uint32_t size = 0;
    ASSERT_TRUE(in.ReadVarint32(&size));
    ASSERT_TRUE(in.Skip(static_cast<int>(size)));
    ++*records;
    absl::StatusOr<ReadTrace> prefix =
        ReadPerfettoTrace(bytes.substr(0, static_cast<size_t>(in.CurrentPosition())));
    ASSERT_TRUE(prefix.ok()) << prefix.status();
    EXPECT_GT(prefix->trace.packet_size(), packets);
    packets = prefix->trace.packet_size();
  }
}

TEST(PerfettoWriterTest, EveryPacketBoundaryIsAValidTrace) {
  std::string dir = TempDir("prefix");
  std::vector<std::string> files;
  const Trace t = SmallTrace();
  ASSERT_TRUE(PerfettoWriter({.deflate_level = 0}).Write(t, ComputeSummary(t), dir, &files).ok());
  int records = 0;
  ExpectEveryRecordBoundaryIsAValidTrace(ReadFile(dir + "/trace.pftrace"), &records);
  EXPECT_GT(records, 10);  // uncompressed: a record per packet

  dir = TempDir("prefix_bundles");
  files.clear();
  const Trace many = ManyIterations(6000);
  ASSERT_TRUE(PerfettoWriter().Write(many, ComputeSummary(many), dir, &files).ok());
  const std::string bytes = ReadFile(dir + "/trace.pftrace");
  ExpectEveryRecordBoundaryIsAValidTrace(bytes, &records);
  EXPECT_GT(records, 2);  // several bundles
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (in.CurrentPosition() < static_cast<int>(bytes.size())) {
    in.ReadTag();
    uint32_t size = 0;
    in.ReadVarint32(&size);
    EXPECT_LT(size, 512u << 10) << "Perfetto wants compressed bundles under 512 KiB";
    in.Skip(static_cast<int>(size));
  }
}

// The compressed and the uncompressed file say the same thing, and both put every timestamp
// on the sequence's incremental clock, each a delta from the packet before.
TEST(PerfettoWriterTest, TimestampsAreDeltasAndCompressionChangesNothingElse) {
  const Trace t = ManyIterations(3000);
  ReadBack plain = WriteAndRead(t, "plain", {.deflate_level = 0});
  ReadBack packed = WriteAndRead(t, "packed");
  EXPECT_EQ(plain.bundles, 0u);
  EXPECT_GT(packed.bundles, 0u);
  ASSERT_EQ(plain.trace.packet_size(), packed.trace.packet_size());
  for (int i = 0; i < plain.trace.packet_size(); ++i) {
    ASSERT_EQ(plain.trace.packet(i).SerializeAsString(), packed.trace.packet(i).SerializeAsString())
        << "packet " << i;
  }
  const TracePacket& first = plain.trace.packet(0);
  EXPECT_EQ(first.trace_packet_defaults().timestamp_clock_id(), PerfettoWriter::kDeltaClockId);
  bool declared = false;
  for (const auto& c : first.clock_snapshot().clocks()) {
    if (c.clock_id() != PerfettoWriter::kDeltaClockId) continue;
    declared = true;
    EXPECT_TRUE(c.is_incremental());
    EXPECT_EQ(c.timestamp(), 1'000'000'000'000u);  // the first event's time
  }
  EXPECT_TRUE(declared);
  uint64_t largest = 0;
  size_t sequences = 0;
  for (int i = 0; i < plain.trace.packet_size(); ++i) {
    const TracePacket& p = plain.trace.packet(i);
    if (p.has_clock_snapshot()) {
      // Each sequence's first packet: absolute, on MONOTONIC, declaring the sequence's clock.
      ++sequences;
      EXPECT_EQ(p.trace_packet_defaults().timestamp_clock_id(), PerfettoWriter::kDeltaClockId);
      EXPECT_EQ(p.sequence_flags(), TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      continue;
    }
    if (!p.has_timestamp()) continue;
    EXPECT_FALSE(p.has_timestamp_clock_id()) << "packet " << i << " is on the default clock";
    largest = std::max<uint64_t>(largest, p.timestamp());
  }
  EXPECT_LT(largest, 200'000u) << "deltas, not absolute times";
  // The tracks' sequence, then one for each lane: framework, runtime and executions (this
  // trace has no DMA).
  EXPECT_EQ(sequences, 4u);
  // And the times they add up to are the trace's: the last iteration's range starts where
  // ManyIterations put it.
  uint64_t last_start = 1'000'000'000'000;
  for (int i = 0; i < 2999; ++i) last_start += 200'000 + static_cast<uint64_t>(i % 7) * 13;
  const std::vector<Slice>& ranges = plain.slices.begin()->second;  // the framework track
  ASSERT_EQ(ranges.size(), 3000u);
  EXPECT_EQ(ranges.back().name, "aten::linear");
  EXPECT_EQ(ranges.back().start, last_start);
  EXPECT_EQ(ranges.back().end, last_start + 100'000);
}

// The daemon lays the lanes out once for both traces (LaneSinkGroup): the files are the ones
// each writer makes alone, byte for byte, in the order the writers were given.
TEST(PerfettoWriterTest, OneLayoutForBothTracesGivesTheSameFiles) {
  for (const Trace& t : {SmallTrace(), ManyIterations(700)}) {
    const std::string alone = TempDir(absl::StrCat("alone", t.processes[0].calls.size()));
    const std::string shared = TempDir(absl::StrCat("shared", t.processes[0].calls.size()));
    std::vector<std::string> alone_files, shared_files;
    ASSERT_TRUE(PerfettoWriter().Write(t, ComputeSummary(t), alone, &alone_files).ok());
    ASSERT_TRUE(ChromeJsonWriter().Write(t, ComputeSummary(t), alone, &alone_files).ok());
    std::vector<std::unique_ptr<LaneSink>> sinks;
    sinks.push_back(std::make_unique<PerfettoWriter>());
    sinks.push_back(std::make_unique<ChromeJsonWriter>());
    ASSERT_TRUE(
        LaneSinkGroup(std::move(sinks)).Write(t, ComputeSummary(t), shared, &shared_files).ok());
    EXPECT_EQ(shared_files, (std::vector<std::string>{"trace.pftrace", "trace.json"}));
    EXPECT_EQ(shared_files, alone_files);
    for (const char* file : {"trace.pftrace", "trace.json"}) {
      const std::string bytes = ReadFile(absl::StrCat(shared, "/", file));
      EXPECT_GT(bytes.size(), 100u) << file;
      EXPECT_EQ(bytes, ReadFile(absl::StrCat(alone, "/", file))) << file;
    }
  }
}

// A failing writer of the group does not keep the others from writing; its error is returned.
TEST(PerfettoWriterTest, OneLayoutForBothTracesReportsTheFirstError) {
  class Failing : public LaneSink {
   public:
    absl::Status WriteLanes(const Trace&, const TraceLanes&, const std::string&,
                            std::vector<std::string>*) override {
      return absl::PermissionDeniedError("cannot write the first file");
    }
  };
  std::vector<std::unique_ptr<LaneSink>> sinks;
  sinks.push_back(std::make_unique<Failing>());
  sinks.push_back(std::make_unique<ChromeJsonWriter>());
  const std::string dir = TempDir("group_error");
  std::vector<std::string> files;
  const Trace t = SmallTrace();
  absl::Status s = LaneSinkGroup(std::move(sinks)).Write(t, ComputeSummary(t), dir, &files);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(files, (std::vector<std::string>{"trace.json"}));
}

TEST(PerfettoWriterTest, UnwritableFolderIsAnErrorAndNamesTheFile) {
  std::vector<std::string> files;
  const Trace t = SmallTrace();
  absl::Status s = PerfettoWriter().Write(t, ComputeSummary(t), TempDir("x") + "/missing", &files);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("trace.pftrace"), std::string::npos) << s;
  EXPECT_TRUE(files.empty());
}

// Not a benchmark: records the size a user can expect, asserts only that it was written.
TEST(PerfettoWriterTest, FileSizePerEvent) {
  const Trace t = ManyIterations(2000);
  const size_t events = EventsOf(t);
  for (int level : {0, 1}) {
    std::string dir = TempDir(absl::StrCat("size", level));
    std::vector<std::string> files;
    ASSERT_TRUE(
        PerfettoWriter({.deflate_level = level}).Write(t, ComputeSummary(t), dir, &files).ok());
    std::string bytes = ReadFile(dir + "/trace.pftrace");
    ReadBack r = Read(bytes);
    size_t slices = 0;
    for (const auto& [track, list] : r.slices) slices += list.size();
    EXPECT_EQ(slices, events);
    double per_event = static_cast<double>(bytes.size()) / events;
    std::cout << "trace.pftrace (deflate level " << level << "): " << bytes.size() << " bytes for "
              << events << " events, " << per_event << " bytes/event\n";
    testing::Test::RecordProperty(absl::StrCat("bytes_per_event_level", level),
                                  std::to_string(per_event));
  }
}

}  // namespace
}  // namespace nrtprof::daemon
