// `nrtprof report` as a user sees it, in a real browser: Debian's chromium, headless, started by
// the test, opens the report of the RMSNorm demo's naive capture. The page loads with no error
// and fetches nothing; its table and chart show the figures `nrtprof summary` prints; a click
// sorts the table; a click on a framework op highlights the runtime call it made and the device
// execution that call caused (one flow, the same correlation id). The timeline opens on the
// busiest step, readably; no two ops of the chart look alike; long notices wrap in a 1280-pixel
// window. The flame graph of device time by stack leads, widest frame after widest frame, to the
// op the table ranks first, whose frame states the table's device time for it, and a click zooms
// into a frame and back out. A distributed job's page names its slow rank in its Collectives
// section, as `nrtprof collectives` does. The screenshot is kept as a test output (report.png in
// TEST_UNDECLARED_OUTPUTS_DIR).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/testing/headless_browser.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::HeadlessBrowser;
using testing::Result;
using testing::Runfile;

Result Nrtprof(const std::vector<std::string>& args) { return testing::RunNrtprof(args); }

// The rows of `nrtprof summary`'s text table, each row's cells joined by '|', and the lines
// under the table.
struct PrintedTable {
  std::vector<std::string> rows;
  std::vector<std::string> closing;
};

PrintedTable ParseSummaryText(const std::string& text) {
  PrintedTable out;
  int rules = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "---")) {
      ++rules;
    } else if (rules == 2) {
      std::vector<std::string> cells =
          absl::StrSplit(absl::StripAsciiWhitespace(line), "  ", absl::SkipWhitespace());
      for (std::string& c : cells) c = std::string(absl::StripAsciiWhitespace(c));
      out.rows.push_back(absl::StrJoin(cells, "|"));
    } else if (rules == 3) {
      out.closing.push_back(std::string(line));
    }
  }
  return out;
}

std::string Eval(HeadlessBrowser* browser, const std::string& expression) {
  absl::StatusOr<std::string> v = browser->Evaluate(expression);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : "";
}

// Scrolls the element into view and clicks its middle, as a user would.
void ClickOn(HeadlessBrowser* browser, const std::string& selector) {
  const std::string at = Eval(
      browser, absl::StrCat("(() => { const e = document.querySelector('", selector,
                            "'); if (!e) return ''; e.scrollIntoView({block: 'center'}); "
                            "const b = e.getBoundingClientRect(); "
                            "return (b.left + b.width / 2) + ',' + (b.top + b.height / 2); })()"));
  ASSERT_FALSE(at.empty()) << "nothing on the page matches " << selector;
  const std::vector<std::string> xy = absl::StrSplit(at, ',');
  ASSERT_TRUE(browser->Click(std::stod(xy[0]), std::stod(xy[1])).ok());
}

// How different two colours look, "rgb(r, g, b)" as the page computes them: their distance in
// CIE L*a*b* (1976), where about 2 is just noticeable and 6 is what the report's hash of the
// names gave aten::mul and aten::rsqrt.
double ColourDifference(const std::string& a, const std::string& b) {
  const auto lab = [](const std::string& css) {
    double rgb[3] = {0, 0, 0};
    sscanf(css.c_str(), "rgb(%lf, %lf, %lf)", &rgb[0], &rgb[1], &rgb[2]);
    for (double& c : rgb) {
      c /= 255;
      c = c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
    }
    const double xyz[3] = {(0.4124 * rgb[0] + 0.3576 * rgb[1] + 0.1805 * rgb[2]) / 0.95047,
                           0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2],
                           (0.0193 * rgb[0] + 0.1192 * rgb[1] + 0.9505 * rgb[2]) / 1.08883};
    double f[3];
    for (int i = 0; i < 3; ++i) {
      f[i] = xyz[i] > 0.008856 ? std::cbrt(xyz[i]) : 7.787 * xyz[i] + 16.0 / 116;
    }
    return std::vector<double>{116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])};
  };
  const std::vector<double> x = lab(a), y = lab(b);
  return std::sqrt(std::pow(x[0] - y[0], 2) + std::pow(x[1] - y[1], 2) + std::pow(x[2] - y[2], 2));
}

class ReportBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = HeadlessBrowser::Find();
    if (chromium_.empty()) {
      GTEST_SKIP() << "SKIPPED: chromium is not installed (third_party/install_debian_deps.sh "
                      "installs it): the report was not checked in a browser";
    }
    const std::string profile = testing::TempDir("chromium");
    absl::StatusOr<std::unique_ptr<HeadlessBrowser>> browser =
        HeadlessBrowser::Start(chromium_, profile, 1280, 900);  // a laptop's window
    if (!browser.ok()) {
      GTEST_SKIP() << "SKIPPED: chromium cannot run here (" << browser.status()
                   << "): the report was not checked in a browser; chromium's log:\n"
                   << testing::ReadFile(profile + "/chromium.log");
    }
    browser_ = std::move(*browser);
    dir_ = testing::TempDir("report-browser");
    // At the device's own pace (NRT_SIM_TIME_SCALE=1, 67 ms for 20 steps), as a program on a
    // real host waits for its device: at scale 0 the device's clock runs ahead of the host's,
    // and how wide the host's slices are in the busiest step's view was the CPU's speed (on a
    // 2.6 GHz Zen 5 VM the step was 0.5 ms for 2.2 ms of device time, and 6 of its 21 slices
    // were wide enough to bear their names).
    std::map<std::string, std::string> env = testing::kIsolatedEnv;
    env["NRT_SIM_TIME_SCALE"] = "1";
    const Result run =
        testing::RunNrtprof({"run", "--out", dir_ + "/naive", "--", Runfile("examples/rmsnorm"),
                             "--variant", "naive", "--iters", "20"},
                            env);
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }

  // The page, loaded and drawn.
  HeadlessBrowser* Open(const std::string& page) {
    EXPECT_TRUE(browser_->Open("file://" + page).ok());
    EXPECT_EQ(Eval(browser_.get(), "document.body.dataset.report"), "ready");
    return browser_.get();
  }

  std::string chromium_, dir_;
  std::unique_ptr<HeadlessBrowser> browser_;
};

TEST_F(ReportBrowserTest, ShowsTheSummaryAndTheChainOfAClickedOp) {
  const std::string page = dir_ + "/report.html";
  const Result report = Nrtprof({"report", dir_ + "/naive", "-o", page});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_TRUE(absl::StartsWith(report.err, "nrtprof report: " + page + " (")) << report.err;
  const Result summary = Nrtprof({"summary", dir_ + "/naive"});
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  const PrintedTable printed = ParseSummaryText(summary.out);
  ASSERT_GT(printed.rows.size(), 5u) << summary.out;

  HeadlessBrowser* browser = Open(page);
  // The table: the same rows, cells and order as `nrtprof summary`, and the same closing lines.
  const std::string table =
      Eval(browser,
           "Array.from(document.querySelectorAll('#ops tbody tr')).map((r) => "
           "Array.from(r.cells).map((c) => c.innerText).join('|')).join('\\n')");
  EXPECT_EQ(table, absl::StrJoin(printed.rows, "\n"));
  EXPECT_EQ(Eval(browser, "document.getElementById('closing').innerText"),
            absl::StrJoin(printed.closing, "\n"));
  // The chart: the ops with device time, largest first, each bar labelled with its Self NEURON
  // time and share as the table prints them.
  std::vector<std::string> expected_bars;
  for (const std::string& row : printed.rows) {
    const std::vector<std::string> cells = absl::StrSplit(row, '|');
    if (cells[3] != "0.000us" && expected_bars.size() < 12) {
      expected_bars.push_back(absl::StrCat(cells[0], " ", cells[3], "  (", cells[4], ")"));
    }
  }
  EXPECT_EQ(Eval(browser,
                 "Array.from(document.querySelectorAll('#chart rect')).map((r) => r.dataset.name + "
                 "' ' + r.nextSibling.textContent).join('\\n')"),
            absl::StrJoin(expected_bars, "\n"));
  EXPECT_TRUE(absl::StartsWith(expected_bars[0], "aten::mul ")) << expected_bars[0];
  // The capture's facts.
  const std::string facts = Eval(browser, "document.getElementById('facts').innerText");
  EXPECT_TRUE(absl::StrContains(facts, "rmsnorm --variant naive --iters 20")) << facts;
  EXPECT_TRUE(absl::StrContains(facts, " UTC")) << facts;
  EXPECT_TRUE(absl::StrContains(Eval(browser, "document.getElementById('drops-verdict').innerText"),
                                "Events dropped: 0; processes cut off: 0"));

  // A click on "# of Calls" sorts by calls, most first: the row `summary --sort calls` puts
  // first.
  ClickOn(browser, "#ops th:last-child");
  const Result by_calls = Nrtprof({"summary", dir_ + "/naive", "--sort", "calls", "--limit", "1"});
  ASSERT_EQ(ParseSummaryText(by_calls.out).rows.size(), 1u) << by_calls.out;
  EXPECT_EQ(Eval(browser,
                 "Array.from(document.querySelector('#ops tbody tr').cells).map("
                 "(c) => c.innerText).join('|')"),
            ParseSummaryText(by_calls.out).rows[0]);

  // The timeline zooms: the whole window's axis starts at 0, the middle half's does not.
  const std::string first_tick = "document.querySelector('#timeline svg > g > text').textContent";
  ClickOn(browser, "#zoom-reset");
  EXPECT_TRUE(absl::StartsWith(Eval(browser, first_tick), "0")) << Eval(browser, first_tick);
  ClickOn(browser, "#zoom-in");
  EXPECT_FALSE(absl::StartsWith(Eval(browser, first_tick), "0")) << Eval(browser, first_tick);

  // A click on aten::mul in the table zooms the timeline to its first one; a click on that op
  // in the timeline highlights its chain: one nrt_execute and the nc_exec_running it caused.
  ClickOn(browser, "#ops td.name[title=\"show the first aten::mul in the timeline\"]");
  ClickOn(browser, "#timeline rect[data-kind=framework][data-name=\"aten::mul\"]");
  EXPECT_EQ(Eval(browser, "document.querySelector('#timeline rect.selected').dataset.name"),
            "aten::mul");
  const std::string chain =
      Eval(browser,
           "Array.from(document.querySelectorAll('#timeline rect.hl')).map((r) => "
           "r.dataset.kind + ' ' + r.dataset.name + ' ' + "
           "(r.textContent.match(/correlation_id=\\d+/) || [''])[0]).sort().join('\\n')");
  const std::vector<std::string> steps = absl::StrSplit(chain, '\n');
  ASSERT_EQ(steps.size(), 2u) << chain;
  ASSERT_TRUE(absl::StartsWith(steps[0], "executions nc_exec_running correlation_id=")) << chain;
  ASSERT_TRUE(absl::StartsWith(steps[1], "runtime nrt_execute correlation_id=")) << chain;
  EXPECT_EQ(steps[0].substr(steps[0].find('=')), steps[1].substr(steps[1].find('=')));
  EXPECT_GT(std::stoi(Eval(browser, "document.querySelectorAll('#timeline rect.dim').length")), 0);
  const std::string panel = Eval(browser, "document.getElementById('chain').innerText");
  EXPECT_TRUE(absl::StrContains(panel, "Selected: aten::mul")) << panel;
  EXPECT_TRUE(absl::StrContains(panel, "device executions (1)")) << panel;

  absl::StatusOr<std::string> png = browser->Screenshot();
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->substr(1, 3), "PNG");
  if (const char* outputs = getenv("TEST_UNDECLARED_OUTPUTS_DIR"); outputs != nullptr) {
    FILE* f = fopen((std::string(outputs) + "/report.png").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fwrite(png->data(), 1, png->size(), f);
    fclose(f);
  }
  EXPECT_TRUE(browser->errors().empty()) << absl::StrJoin(browser->errors(), "\n");
  for (const std::string& url : browser->requests()) EXPECT_EQ(url, "file://" + page);
}

// Past --max_slices the timeline draws the first slices one by one and the rest as busy time,
// and says so; the table still counts every event.
TEST_F(ReportBrowserTest, ALargeCaptureSaysWhatItDrawsAsBusyTime) {
  const std::string page = dir_ + "/sampled.html";
  const Result report = Nrtprof({"report", dir_ + "/naive", "-o", page, "--max_slices", "50"});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  // "(N of M slices drawn one by one; ...)": N at most 50, and the page says the same.
  const size_t open = report.err.find('(');
  ASSERT_NE(open, std::string::npos) << report.err;
  const std::string counts = report.err.substr(open + 1, report.err.find(" slices") - open - 1);
  const int drawn = std::stoi(counts);
  EXPECT_GT(drawn, 0) << report.err;
  EXPECT_LE(drawn, 50) << report.err;
  HeadlessBrowser* browser = Open(page);
  const std::string notice = Eval(browser, "document.getElementById('truncated').innerText");
  EXPECT_TRUE(absl::StartsWith(
      notice, "Large capture: the timeline draws the first " + counts + " slices one by one"))
      << notice << " / " << report.err;
  ClickOn(browser, "#zoom-reset");  // it opens on a step, drawn one by one
  EXPECT_GT(std::stoi(Eval(browser, "document.querySelectorAll('#timeline rect.density').length")),
            0);
  const Result summary = Nrtprof({"summary", dir_ + "/naive"});
  EXPECT_EQ(Eval(browser,
                 "Array.from(document.querySelector('#ops tbody tr').cells).map("
                 "(c) => c.innerText).join('|')"),
            ParseSummaryText(summary.out).rows[0]);  // the table is whole
  EXPECT_TRUE(browser->errors().empty()) << absl::StrJoin(browser->errors(), "\n");
}

// Each op has its own colour, the same in the chart and the timeline, and no two ops of the
// chart look alike: not aten::mul and aten::rsqrt, which a hash of the names made two yellows.
TEST_F(ReportBrowserTest, OpsHaveClearlyDifferentColours) {
  const std::string page = dir_ + "/report.html";
  const Result report = Nrtprof({"report", dir_ + "/naive", "-o", page});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  HeadlessBrowser* browser = Open(page);
  const std::string fill_of =
      "(selector) => { const e = document.querySelector(selector); "
      "return e ? getComputedStyle(e).fill : 'none'; }";
  std::vector<std::pair<std::string, std::string>> bars;  // name, colour
  for (absl::string_view line :
       absl::StrSplit(Eval(browser,
                           "Array.from(document.querySelectorAll('#chart rect')).map((r) => "
                           "r.dataset.name + '=' + getComputedStyle(r).fill).join('\\n')"),
                      '\n', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> bar = absl::StrSplit(line, '=');
    bars.push_back(bar);
  }
  ASSERT_GE(bars.size(), 4u);
  for (size_t i = 0; i < bars.size(); ++i) {
    for (size_t j = i + 1; j < bars.size(); ++j) {
      EXPECT_GT(ColourDifference(bars[i].second, bars[j].second), 20)
          << bars[i].first << " is " << bars[i].second << ", " << bars[j].first << " is "
          << bars[j].second;
    }
  }
  for (const std::string op : {"aten::mul", "aten::rsqrt"}) {
    const std::string selector = absl::StrCat("[data-name=\"", op, "\"]");
    const std::string bar =
        Eval(browser, absl::StrCat("(", fill_of, ")('#chart rect", selector, "')"));
    EXPECT_NE(bar, "none") << op << " has no bar in the chart";
    ClickOn(browser,
            absl::StrCat("#ops td.name[title=\"show the first ", op, " in the timeline\"]"));
    EXPECT_EQ(Eval(browser, absl::StrCat("(", fill_of, ")('#timeline rect", selector, "')")), bar)
        << op << " in the timeline and in the chart";
  }
}

// The timeline opens on one step, the busiest, where a user can read the ops, not on the whole
// capture, where most of them are grey marks too small to draw; it says so, and Whole window
// shows all of it.
TEST_F(ReportBrowserTest, OpensOnTheBusiestStepReadably) {
  const std::string page = dir_ + "/report.html";
  const Result report = Nrtprof({"report", dir_ + "/naive", "-o", page});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  HeadlessBrowser* browser = Open(page);
  // The slices in view are drawn one by one, many wide enough to bear their names; few are the
  // grey marks of slices too small to draw.
  const auto count = [&](const std::string& selector) {
    return std::stoi(
        Eval(browser, absl::StrCat("document.querySelectorAll('", selector, "').length")));
  };
  const int slices = count("#timeline rect.slice"), marks = count("#timeline rect.agg");
  EXPECT_GE(slices, 10);
  EXPECT_LE(marks * 10, slices) << marks << " grey marks, " << slices << " slices";
  EXPECT_GE(count("#timeline text.slice-name") * 3, slices)
      << "a third of the slices or more are wide enough to bear their names";
  const std::string note = "document.getElementById('view-note').innerText";
  const std::string shown = Eval(browser, note);
  ASSERT_TRUE(absl::StartsWith(shown, "Showing step ")) << shown;
  EXPECT_TRUE(absl::StrContains(shown, ", the busiest (")) << shown;
  EXPECT_TRUE(absl::StrContains(shown, "Whole window for the whole ")) << shown;
  // That step fills the view: its range spans nearly all of the plot (the timeline's width but
  // for its 230 pixels of lane names).
  const std::string step = absl::StrCat("ProfilerStep#", shown.substr(13, shown.find(',') - 13));
  const double plot =
      std::stod(Eval(browser, "document.querySelector('#timeline svg').width.baseVal.value")) - 230;
  EXPECT_GT(std::stod(Eval(browser, absl::StrCat("(() => { const r = document.querySelector("
                                                 "'#timeline rect[data-name=\"",
                                                 step,
                                                 "\"]'); return r ? r.width.baseVal.value : 0; "
                                                 "})()"))),
            0.9 * plot)
      << step;
  ClickOn(browser, "#zoom-reset");
  EXPECT_TRUE(absl::StartsWith(Eval(browser, note), "Showing the whole ")) << Eval(browser, note);
  EXPECT_TRUE(browser->errors().empty()) << absl::StrJoin(browser->errors(), "\n");
}

// What the shim could not record is said in a sentence or two with no line breaks (here the
// daemon's own words for executions the program held back, and a path); on a 1280-pixel window
// the closing lines and the drops table's "Not recorded" column wrap instead of pushing the page
// sideways.
TEST_F(ReportBrowserTest, LongNoticesWrapWithinThePage) {
  const std::string page = dir_ + "/notices.html";
  const Result report = Nrtprof({"report", dir_ + "/naive", "-o", page});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const std::string notice =
      "device events of 1206 of its 1206 executions: the program runs the runtime's system trace "
      "itself (nrt_sys_trace_start), and nrtprof receives them only as the program fetches them, "
      "at the latest when it ends; its model /home/user/checkpoints/llama-3-8b-instruct/"
      "compiled-neff-cache/neuronxcc-2.14.227.0+2d4f85be/MODULE_8839210044217563229+d41d8cd9/"
      "model.neff";
  // The page as `nrtprof report` writes it for a process with that notice (the summary's
  // closing line and the process's metadata), the rest of the capture unchanged.
  std::string html = testing::ReadFile(page);
  const std::pair<std::string, std::string> lists[] = {
      {"\"notices\":[", notice}, {"\"closing\":[", "Not recorded: pid 1 (rmsnorm): " + notice}};
  for (const auto& [list, line] : lists) {
    const size_t at = html.find(list);
    ASSERT_NE(at, std::string::npos) << "no " << list << " in the page's data";
    const bool empty = html[at + list.size()] == ']';
    html.insert(at + list.size(), absl::StrCat("\"", line, "\"", empty ? "" : ","));
  }
  std::ofstream(page, std::ios::trunc) << html;

  HeadlessBrowser* browser = Open(page);
  EXPECT_TRUE(absl::StrContains(Eval(browser, "document.getElementById('closing').innerText"),
                                "Not recorded: pid 1 (rmsnorm): " + notice));
  EXPECT_TRUE(absl::StartsWith(
      Eval(browser, "document.querySelector('#processes tbody td:last-child').innerText"), notice));
  // Nothing sticks out of the window: the page does not scroll sideways.
  EXPECT_EQ(
      Eval(browser, "document.documentElement.scrollWidth <= document.documentElement.clientWidth"),
      "true")
      << "the page is " << Eval(browser, "document.documentElement.scrollWidth")
      << " pixels wide in a window of " << Eval(browser, "document.documentElement.clientWidth");
  EXPECT_TRUE(browser->errors().empty()) << absl::StrJoin(browser->errors(), "\n");
}

// A frame of the flame graph as drawn: its rect's attributes, width and title.
struct DrawnFrame {
  std::string id, parent, name;
  double width = 0;
  std::string title;
};

std::vector<DrawnFrame> FlameFrames(HeadlessBrowser* browser) {
  std::vector<DrawnFrame> out;
  const std::string drawn =
      Eval(browser,
           "Array.from(document.querySelectorAll('#flame rect')).map((r) => [r.dataset.frame, "
           "r.dataset.parent, r.dataset.name, r.width.baseVal.value, "
           "r.querySelector('title').textContent.replace(/\\n/g, '/')].join('|')).join('\\n')");
  for (absl::string_view line : absl::StrSplit(drawn, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> f = absl::StrSplit(line, '|');
    if (f.size() != 5) {
      ADD_FAILURE() << "a flame graph frame drawn as " << line;
      continue;
    }
    out.push_back({f[0], f[1], f[2], std::stod(f[3]), f[4]});
  }
  return out;
}

const DrawnFrame* Widest(const std::vector<DrawnFrame>& frames, const std::string& parent) {
  const DrawnFrame* widest = nullptr;
  for (const DrawnFrame& f : frames) {
    if (f.parent == parent && (widest == nullptr || f.width > widest->width)) widest = &f;
  }
  return widest;
}

// The flame graph, under the table, as a user reads it: from the root, the widest frame at each
// level leads through the step and the rmsnorm range to the op the table ranks first (aten::mul),
// whose title states its device time as the table's NEURON total, then its runtime call and
// model; a click on it zooms into it (the whole width, its siblings gone), a second click zooms
// back out, and Reset zoom shows all of it again.
TEST_F(ReportBrowserTest, TheFlameGraphLeadsToTheTablesFirstOpAndZooms) {
  const std::string page = dir_ + "/report.html";
  const Result report = Nrtprof({"report", dir_ + "/naive", "-o", page});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  const Result summary = Nrtprof({"summary", dir_ + "/naive"});
  ASSERT_EQ(summary.exit_code, 0) << summary.err;
  std::map<std::string, std::vector<std::string>> rows;  // by name, as printed
  const PrintedTable printed = ParseSummaryText(summary.out);
  for (const std::string& row : printed.rows) {
    std::vector<std::string> cells = absl::StrSplit(row, '|');
    rows[cells[0]] = cells;
  }
  ASSERT_FALSE(printed.rows.empty());
  const std::string first = std::vector<std::string>(absl::StrSplit(printed.rows[0], '|'))[0];
  ASSERT_EQ(first, "aten::mul") << summary.out;

  HeadlessBrowser* browser = Open(page);
  EXPECT_EQ(Eval(browser, "document.getElementById('flame-title').innerText"),
            "Device time by stack (flame graph)");
  std::vector<DrawnFrame> frames = FlameFrames(browser);
  ASSERT_GT(frames.size(), 5u);
  const double full =
      std::stod(Eval(browser, "document.querySelector('#flame svg').width.baseVal.value"));
  // Widest frame after widest frame from the root, to the first of the table's ops with Self
  // NEURON time.
  std::vector<std::string> path;
  const DrawnFrame* at = Widest(frames, "-1");  // the root
  ASSERT_NE(at, nullptr);
  EXPECT_TRUE(absl::StartsWith(at->title, "all device time/device time ")) << at->title;
  EXPECT_GT(at->width, full - 1);
  while (true) {
    at = Widest(frames, at->id);
    ASSERT_NE(at, nullptr) << "no op of the table on the widest path: "
                           << absl::StrJoin(path, " > ");
    path.push_back(at->name);
    if (rows.count(at->name) != 0 && rows[at->name][3] != "0.000us") break;
  }
  EXPECT_EQ(absl::StrJoin(path, " > "), "ProfilerStep* > rmsnorm > aten::mul");
  // Its title: its name, its device time and share, and (an op also run outside the steps, as
  // the demo's warm-up is) what all its frames hold: the table's NEURON total for it.
  const DrawnFrame mul = *at;
  ASSERT_TRUE(absl::StartsWith(mul.title, "aten::mul/device time ")) << mul.title;
  EXPECT_TRUE(absl::StrContains(mul.title, "% of all device time/")) << mul.title;
  const std::string own = mul.title.substr(22, mul.title.find(',') - 22);
  std::string all = own;
  if (const size_t in_all = mul.title.find(" aten::mul frames: "); in_all != std::string::npos) {
    const size_t from = in_all + std::string(" aten::mul frames: ").size();
    all = mul.title.substr(from, mul.title.find(',', from) - from);
  }
  EXPECT_EQ(all, rows["aten::mul"][5])
      << mul.title << " against the table's row " << absl::StrJoin(rows["aten::mul"], "|");
  // Under it, its runtime call, then the model it ran.
  const DrawnFrame* call = Widest(frames, mul.id);
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->name, "nrt_execute");
  const DrawnFrame* model = Widest(frames, call->id);
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->name.empty());
  const double mul_width = mul.width;
  EXPECT_LT(mul_width, 0.9 * full);

  // A click zooms into it: the whole width, nothing beside it, the note says so.
  ClickOn(browser, "#flame rect[data-frame=\"" + mul.id + "\"]");
  frames = FlameFrames(browser);
  double zoomed = 0;
  for (const DrawnFrame& f : frames) {
    if (f.id == mul.id) {
      zoomed = f.width;
    } else {
      EXPECT_NE(f.parent, mul.parent) << f.name << " beside the zoomed frame";
    }
  }
  EXPECT_GT(zoomed, full - 1);
  EXPECT_TRUE(absl::StartsWith(Eval(browser, "document.getElementById('flame-note').innerText"),
                               "Zoomed into aten::mul: " + own + ", "));
  // A second click zooms back out, to its parent; Reset zoom to all of it.
  ClickOn(browser, "#flame rect[data-frame=\"" + mul.id + "\"]");
  EXPECT_TRUE(absl::StartsWith(Eval(browser, "document.getElementById('flame-note').innerText"),
                               "Zoomed into rmsnorm: "));
  ClickOn(browser, "#flame-reset");
  EXPECT_TRUE(absl::StartsWith(Eval(browser, "document.getElementById('flame-note').innerText"),
                               "Showing all "));
  for (const DrawnFrame& f : FlameFrames(browser)) {
    if (f.id == mul.id) {
      EXPECT_NEAR(f.width, mul_width, 0.01);
    }
  }
  EXPECT_TRUE(browser->errors().empty()) << absl::StrJoin(browser->errors(), "\n");
}

// A distributed job's page (cc_job, 4 ranks, rank 1 slow): its Collectives section draws the
// rows and the slowest rank's line `nrtprof collectives` prints, fits the window, and the page
// loads with no error.
TEST_F(ReportBrowserTest, ACollectiveJobsPageNamesItsSlowRank) {
  std::map<std::string, std::string> env = testing::kIsolatedEnv;
  env["NRT_SIM_TIME_SCALE"] = "0";
  const Result run = testing::RunNrtprof(
      {"run", "--quiet", "--out", dir_ + "/job", "--", Runfile("examples/cc_job"), "--ranks", "4",
       "--steps", "3", "--slow-rank", "1", "--slow-ms", "100"},
      env);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Result collectives = Nrtprof({"collectives", dir_ + "/job"});
  ASSERT_EQ(collectives.exit_code, 0) << collectives.err;
  std::string slowest;
  for (absl::string_view line : absl::StrSplit(collectives.out, '\n')) {
    if (absl::StartsWith(line, "Slowest rank: ")) slowest = std::string(line);
  }
  ASSERT_TRUE(absl::StartsWith(slowest, "Slowest rank: 1 (")) << collectives.out;
  const std::string page = dir_ + "/job.html";
  const Result report = Nrtprof({"report", dir_ + "/job", "-o", page});
  ASSERT_EQ(report.exit_code, 0) << report.err;

  HeadlessBrowser* browser = Open(page);
  EXPECT_EQ(Eval(browser, "document.getElementById('collectives-title').innerText"), "Collectives");
  EXPECT_EQ(Eval(browser, "String(document.querySelectorAll('#collectives tbody tr').length)"),
            "3");
  EXPECT_EQ(Eval(browser, "String(document.querySelectorAll('#stragglers tbody tr').length)"), "4");
  EXPECT_EQ(Eval(browser, "document.getElementById('slowest-rank').innerText"), slowest);
  EXPECT_EQ(
      Eval(browser, "document.documentElement.scrollWidth <= document.documentElement.clientWidth"),
      "true");
  EXPECT_TRUE(browser->errors().empty()) << absl::StrJoin(browser->errors(), "\n");
}

}  // namespace
}  // namespace nrtprof
