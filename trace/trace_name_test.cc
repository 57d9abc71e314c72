#include "trace/trace_name.h"

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

TEST(NameTest, ReadsAsItsText) {
  NameTable table;
  const Name n = table.Intern("nrt_execute");
  EXPECT_EQ(n, "nrt_execute");
  EXPECT_EQ(n.str(), "nrt_execute");
  EXPECT_EQ(n.view(), "nrt_execute");
  EXPECT_EQ(n.size(), 11u);
  EXPECT_STREQ(n.c_str(), "nrt_execute");
  const std::string& as_string = n;
  EXPECT_EQ(as_string, "nrt_execute");
  std::ostringstream printed;
  printed << n;
  EXPECT_EQ(printed.str(), "nrt_execute");
  EXPECT_NE(n, "nrt_load");
}

TEST(NameTest, OneTextIsKeptOnce) {
  NameTable table;
  const Name a = table.Intern("rmsnorm");
  const Name b = table.Intern(std::string("rms") + "norm");
  EXPECT_EQ(a.id(), b.id());
  EXPECT_EQ(table.size(), 1u);
  EXPECT_NE(a.id(), table.Intern("gelu").id());
  EXPECT_EQ(table.size(), 2u);
}

TEST(NameTest, EmptyTextIsTheEmptyName) {
  NameTable table;
  const Name empty = table.Intern("");
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty, Name());
  EXPECT_EQ(empty.id(), nullptr);
  EXPECT_EQ(empty.str(), "");
  EXPECT_EQ(table.size(), 0u);
}

TEST(NameTest, NamesOfTwoTablesCompareByText) {
  NameTable one, two;
  const Name a = one.Intern("matmul");
  const Name b = two.Intern("matmul");
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a < b || b < a);
  EXPECT_TRUE(one.Intern("add") < b);
}

TEST(NameTest, NamesStayValidAsTheTableGrowsAndMoves) {
  auto table = std::make_unique<NameTable>();
  const Name first = table->Intern("first");
  for (int i = 0; i < 10000; ++i) table->Intern("name " + std::to_string(i));
  EXPECT_EQ(first, "first");
  EXPECT_EQ(table->Intern("first").id(), first.id());
  NameTable moved = std::move(*table);
  table.reset();
  EXPECT_EQ(first, "first");
  EXPECT_EQ(moved.Intern("first").id(), first.id());
}

TEST(NameTest, LiteralsAreSharedAcrossThreads) {
  const Name here = "nc_exec_running";
  std::vector<const void*> ids(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&ids, i] { ids[i] = Name("nc_exec_running").id(); });
  }
  for (std::thread& t : threads) t.join();
  for (const void* id : ids) EXPECT_EQ(id, here.id());
  EXPECT_EQ(Name::Lasting(std::string("nc_exec") + "_running").id(), here.id());
}

}  // namespace
}  // namespace nrtprof::daemon
