// Slurm node-list and tasks-per-node expansion: a table of cases, as Slurm writes them.
#include <gtest/gtest.h>

#include <cctype>

#include "ddp/error.h"
#include "ddp/hostlist.h"

using Hosts = std::vector<std::string>;

struct HostlistCase {
  std::string input;
  Hosts expected;
};

class Hostlist : public ::testing::TestWithParam<HostlistCase> {};

TEST_P(Hostlist, Expands) { EXPECT_EQ(ddp::expand_hostlist(GetParam().input), GetParam().expected); }

INSTANTIATE_TEST_SUITE_P(
    Table, Hostlist,
    ::testing::Values(HostlistCase{"node1", {"node1"}},                              // a single host
                      HostlistCase{"node[1-3]", {"node1", "node2", "node3"}},        // a range
                      HostlistCase{"n[001-003]", {"n001", "n002", "n003"}},          // zero padding
                      HostlistCase{"n[098-101]", {"n098", "n099", "n100", "n101"}},  // padding across widths
                      HostlistCase{"gpu[1,3,5]", {"gpu1", "gpu3", "gpu5"}},          // a list
                      HostlistCase{"gpu[1-2,7]", {"gpu1", "gpu2", "gpu7"}},          // range and list
                      HostlistCase{"a,b", {"a", "b"}},                               // plain names
                      HostlistCase{"n[01-10]",
                                   {"n01", "n02", "n03", "n04", "n05", "n06", "n07", "n08", "n09",
                                    "n10"}},                          // width of the lower bound
                      HostlistCase{"x[1-2]y[3]", {"x1y3", "x2y3"}},   // a one-element group
                      HostlistCase{"a[1-2],b3", {"a1", "a2", "b3"}},  // several groups
                      HostlistCase{"a1,b[2-3],c", {"a1", "b2", "b3", "c"}},
                      HostlistCase{"n[1-2]-ib", {"n1-ib", "n2-ib"}},                   // a suffix
                      HostlistCase{"r[1-2]n[1-2]", {"r1n1", "r1n2", "r2n1", "r2n2"}},  // two bracket groups
                      HostlistCase{"gpua[001-002]", {"gpua001", "gpua002"}},           // Delta-style names
                      HostlistCase{"della-l[07-08]g1", {"della-l07g1", "della-l08g1"}}),
    [](const ::testing::TestParamInfo<HostlistCase>& test) {  // not `info`: the macro's parameter
      std::string name = "case" + std::to_string(test.index) + "_";
      for (char c : test.param.input) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(Hostlist, RejectsMalformedLists) {
  for (const char* bad : {"", "node[1-3", "node1-3]", "n[3-1]", "n[a-b]", "a,,b", "n[[1]]", "n[]"})
    EXPECT_THROW(ddp::expand_hostlist(bad), ddp::Error) << "input: '" << bad << "'";
}

// Numbers that do not fit, and lists that would expand to millions of hosts, are typos: a clear
// error, not an exception from the standard library or a machine out of memory.
TEST(Hostlist, RejectsHugeNumbersAndExpansions) {
  for (const char* bad : {"n[1-99999999999999999999]", "n[99999999999999999999-1]", "a[1-300]b[1-300]c[1-300]"}) {
    try {
      ddp::expand_hostlist(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const ddp::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot expand Slurm node list"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ddp::expand_hostlist("a[1-100]b[1-100]").size(), 10000u);  // large but plausible
}

TEST(TasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(ddp::expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(ddp::expand_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(ddp::expand_tasks_per_node("1,2,3"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ddp::expand_tasks_per_node("2(x2)"), (std::vector<int>{2, 2}));
}

TEST(TasksPerNode, RejectsMalformed) {
  for (const char* bad : {"", "2(x", "x2", "2(3)", "0", "2(x0)", "a,1", "1,,2", "1(x1000000000)", "99999999999(x2)",
                          "2(x99999999999999999999)"})
    EXPECT_THROW(ddp::expand_tasks_per_node(bad), ddp::Error) << "input: '" << bad << "'";
}
