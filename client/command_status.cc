// `nrtprof status`: what the daemon is doing.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "client/commands.h"
#include "client/daemon_connection.h"
#include "client/daemon_credentials.h"
#include "client/flags.h"
#include "common/address.h"
#include "common/terminal_text.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(bool, json, false,
          "print the status as one JSON object (the StatusReply message, its field names as in "
          "proto/nrtprof.proto), for scripts");
ABSL_FLAG(std::string, addr, "",
          "the daemon: unix:/path, /path, or HOST:PORT (TLS: with --tls_ca, and --token_file or "
          "--tls_cert and --tls_key); default $NRTPROF_ADDR, else the per-user socket");

namespace nrtprof::cli {

std::unique_ptr<DaemonConnection> ConnectToStandingDaemon(const char* command, int* exit_code,
                                                          std::string* address_out) {
  const std::string flag = absl::GetFlag(FLAGS_addr);
  const std::string address = flag.empty() ? DaemonAddress() : ToGrpcTarget(flag);
  if (address_out != nullptr) *address_out = address;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      CredentialsFor(address, TlsPathsFromFlags());
  if (!credentials.ok()) {
    fprintf(stderr, "nrtprof %s: %s\n", command, std::string(credentials.status().message()).c_str());
    *exit_code = credentials.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<DaemonConnection>> connection =
      DaemonConnection::Connect(address, 2000, *credentials);
  if (!connection.ok()) {
    // Nobody there: say how to have one.
    const bool absent = connection.status().code() == absl::StatusCode::kUnavailable ||
                        connection.status().code() == absl::StatusCode::kNotFound;
    fprintf(stderr, "nrtprof %s: %s%s\n", command,
            std::string(connection.status().message()).c_str(),
            absent ? " (start one with `nrtprofd &`, or as a service: README, \"Always on\"; "
                     "nrtprof run starts a private one by itself)"
                   : "");
    // A setting that cannot be used (NRTPROF_SERVICE_USER naming no user) is bad input.
    *exit_code = connection.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    return nullptr;
  }
  return std::move(*connection);
}

int StatusCommand(int argc, char** argv) {
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    fprintf(stderr, "nrtprof status: unexpected argument '%s'\n", args[1]);
    return 2;
  }
  int exit_code = 0;
  std::string address;
  std::unique_ptr<DaemonConnection> connection =
      ConnectToStandingDaemon("status", &exit_code, &address);
  if (connection == nullptr) return exit_code;
  absl::StatusOr<StatusReply> status = connection->Status(2000);
  if (!status.ok()) {
    fprintf(stderr, "nrtprof status: %s\n", std::string(status.status().message()).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    options.preserve_proto_field_names = true;
    if (!google::protobuf::util::MessageToJsonString(*status, &json, options).ok()) {
      fprintf(stderr, "nrtprof status: the daemon's status does not print as JSON\n");
      return 1;
    }
    printf("%s\n", json.c_str());
    return 0;
  }
  if (KindOf(address) == AddressKind::kTcp) {
    printf("daemon:              %s over TLS (nrtprofd %s; its local socket %s)\n",
           address.c_str(), status->daemon_version().c_str(), status->address().c_str());
  } else {
    printf("daemon:              %s (nrtprofd %s)\n", status->address().c_str(),
           status->daemon_version().c_str());
  }
  printf("uptime:              %.1f s\n", status->uptime_ms() / 1000.0);
  printf("connected processes: %d\n", status->processes_size());
  for (const ConnectedProcess& p : status->processes()) {
    // The executable last: a long path then leaves the columns before it aligned; the job
    // (NRTPROF_JOB, NEURON_RT_ROOT_COMM_ID) after it, when the process named one. Both are
    // what the process said, any bytes: shown as visible text (terminal_text.h). Its rank as
    // `nrtprof top` shows it, "-" if it said none.
    const std::string step = p.last_step() < 0 ? "-" : std::to_string(p.last_step());
    const std::string rank = p.has_rank() ? std::to_string(p.rank()) : "-";
    printf("  pid %-8u rank %-5s events %-10llu step %-8s capture %-18s %s%s%s\n", p.pid(),
           rank.c_str(), static_cast<unsigned long long>(p.events_received()), step.c_str(),
           p.capture_id().empty() ? "-" : TerminalText(p.capture_id()).c_str(),
           TerminalText(p.executable()).c_str(), p.job().empty() ? "" : "  job ",
           TerminalText(p.job()).c_str());
  }
  printf("events received:     %llu\n",
         static_cast<unsigned long long>(status->events_received()));
  uint64_t dropped = 0;
  for (const DropReason& d : status->dropped()) dropped += d.events();
  printf("events dropped:      %llu\n", static_cast<unsigned long long>(dropped));
  for (const DropReason& d : status->dropped()) {
    printf("  %-20s %llu\n", d.reason().c_str(), static_cast<unsigned long long>(d.events()));
  }
  if (dropped != 0) {
    const nrtprof::EventsByLane& lanes = status->dropped_by_lane();
    printf("  by lane:           framework %llu, runtime %llu, hardware %llu\n",
           static_cast<unsigned long long>(lanes.framework()),
           static_cast<unsigned long long>(lanes.runtime()),
           static_cast<unsigned long long>(lanes.hardware()));
  }
  printf("final batches alone: %llu\n",
         static_cast<unsigned long long>(status->final_batches_alone()));
  printf("captures written:    %llu\n",
         static_cast<unsigned long long>(status->captures_written()));
  if (status->captures().empty()) {
    printf("recording:           no capture in progress\n");
  }
  for (const CaptureInProgress& c : status->captures()) {
    std::string what = absl::StrFormat("%.1f s so far", c.running_ms() / 1000.0);
    if (c.iterations() != 0) {
      what = absl::StrFormat("steps %llu to %llu", static_cast<unsigned long long>(c.first_step()),
                             static_cast<unsigned long long>(c.first_step() + c.iterations() - 1));
    } else if (c.last_ms() != 0) {
      what = absl::StrFormat("the %.1f s before it and %s", c.last_ms() / 1000.0, what);
    }
    printf("recording:           capture %s, %s, %u process%s -> %s\n",
           TerminalText(c.capture_id()).c_str(), what.c_str(), c.processes(),
           c.processes() == 1 ? "" : "es", TerminalText(c.output_dir()).c_str());
  }
  const FlightRecorderStatus& recorder = status->flight_recorder();
  if (recorder.seconds_limit() == 0) {
    printf("flight recorder:     off (processes record only in a capture)\n");
  } else {
    printf("flight recorder:     holding %.1f s, %llu events, %.1f MiB (bounds %llu s, %llu MiB); "
           "%llu events evicted\n",
           recorder.oldest_age_ms() / 1000.0, static_cast<unsigned long long>(recorder.events()),
           recorder.bytes() / 1048576.0, static_cast<unsigned long long>(recorder.seconds_limit()),
           static_cast<unsigned long long>(recorder.bytes_limit() >> 20),
           static_cast<unsigned long long>(recorder.evicted_events()));
  }
  if (status->has_fleet_export()) {
    const FleetExportStatus& f = status->fleet_export();
    printf("fleet store:         %s every %.1f s: %llu rows and %llu captures exported, %llu rows "
           "buffered (%.1f of %llu MiB), %llu dropped, %llu retries (%llu found in already)\n",
           f.clickhouse_url().c_str(), f.period_ms() / 1000.0,
           static_cast<unsigned long long>(f.rows_exported()),
           static_cast<unsigned long long>(f.captures_exported()),
           static_cast<unsigned long long>(f.rows_buffered()), f.bytes_buffered() / 1048576.0,
           static_cast<unsigned long long>(f.bytes_limit() >> 20),
           static_cast<unsigned long long>(f.rows_dropped()),
           static_cast<unsigned long long>(f.retries()),
           static_cast<unsigned long long>(f.retries_found_in()));
    if (f.exports() != 0) {
      printf("  cost:              %.2f ms CPU per export (fold %.2f, rows %.2f, sending %.2f) "
             "over %llu exports\n",
             (f.fold_cpu_ns() + f.rows_cpu_ns() + f.send_cpu_ns()) / 1e6 / f.exports(),
             f.fold_cpu_ns() / 1e6 / f.exports(), f.rows_cpu_ns() / 1e6 / f.exports(),
             f.send_cpu_ns() / 1e6 / f.exports(), static_cast<unsigned long long>(f.exports()));
    }
    if (!f.last_error().empty()) {
      printf("  failing:           %s\n", TerminalText(f.last_error()).c_str());
    }
  }
  // The trigger rules (nrtprofd --trigger), and the captures they (or a peer's) took;
  // `nrtprof captures` lists them.
  if (!status->triggers().empty() || !status->triggered_captures().empty()) {
    printf("triggered captures:  %d kept, %.1f of %.1f MiB (nrtprof captures lists them)\n",
           status->triggered_captures_size(), status->triggered_bytes() / 1048576.0,
           status->triggered_bytes_limit() / 1048576.0);
  }
  for (const TriggerRuleStatus& r : status->triggers()) {
    printf("  rule %-14s %llu triggered, %llu suppressed, %llu captured, %llu failed, %llu "
           "removed\n",
           TerminalText(r.name()).c_str(), static_cast<unsigned long long>(r.triggers()),
           static_cast<unsigned long long>(r.suppressed()),
           static_cast<unsigned long long>(r.captures()),
           static_cast<unsigned long long>(r.failed()),
           static_cast<unsigned long long>(r.removed()));
  }
  return 0;
}

}  // namespace nrtprof::cli
