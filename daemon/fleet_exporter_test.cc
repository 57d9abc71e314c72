// The fleet exporter's bound: rows queued for ClickHouse beyond --clickhouse_buffer_bytes are
// dropped and counted, whole batches at a time (the sending side is tests/fleet/'s, with a real
// ClickHouse).
#include "daemon/fleet_exporter.h"

#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

Trace OneProcess() {
  Trace trace;
  trace.capture_id = "cap-1";
  ProcessTrace p;
  p.pid = 42;
  p.host = "trn1-01";
  trace.processes.push_back(p);
  return trace;
}

TEST(FleetExporterTest, RowsOverTheBufferAreDroppedAndCounted) {
  FleetExporterOptions options;
  options.clickhouse.url = "http://127.0.0.1:1";  // never reached: the exporter is not started
  options.host = "trn1-01";
  options.buffer_bytes = 1000;  // room for a few capture rows (about 400 bytes each)
  FleetExporter exporter(options);
  Summary summary;
  summary.rows.push_back(SummaryRow{"aten::mul", 10, 10, 5000, 5000, 3});
  nrtprof::CaptureFiles files;
  files.set_output_dir("/captures/cap-1");
  files.add_files("trace.pftrace");
  for (int i = 0; i < 10; ++i) exporter.CaptureWritten(OneProcess(), summary, files);

  nrtprof::FleetExportStatus status;
  exporter.FillStatus(&status);
  EXPECT_GT(status.rows_buffered(), 0u);
  EXPECT_GT(status.rows_dropped(), 0u);
  EXPECT_EQ(status.rows_buffered() + status.rows_dropped(), 10u);
  EXPECT_LE(status.bytes_buffered(), 1000u);
  EXPECT_EQ(status.bytes_limit(), 1000u);
  EXPECT_EQ(status.rows_exported(), 0u);
}

TEST(FleetExporterTest, DatabaseNamesAreIdentifiers) {
  EXPECT_TRUE(FleetExporter::CheckDatabaseName("nrtprof_2").ok());
  EXPECT_EQ(FleetExporter::CheckDatabaseName("a; DROP TABLE x").message(),
            "--clickhouse_database 'a; DROP TABLE x' must be 1 to 64 letters, digits or '_'");
  EXPECT_FALSE(FleetExporter::CheckDatabaseName("").ok());
}

}  // namespace
}  // namespace nrtprof::daemon
