// The report page's script and style, client/report/report.{js,css}, compiled into the binary
// (a genrule in client/BUILD makes report_assets.cc), so `nrtprof report` needs no file beside it.
#ifndef NRTPROF_CLIENT_REPORT_ASSETS_H_
#define NRTPROF_CLIENT_REPORT_ASSETS_H_

namespace nrtprof::cli {

extern const char kReportJs[];
extern const char kReportCss[];

}  // namespace nrtprof::cli

#endif  // NRTPROF_CLIENT_REPORT_ASSETS_H_
