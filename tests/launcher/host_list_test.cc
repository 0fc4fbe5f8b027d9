// Unit tests of the -H / --hostfile parser (tools/chorusrun/host_list.h): both hostfile formats,
// comments, and the errors.
#include "host_list.h"

#include <gtest/gtest.h>

#include "chorus/error.h"

namespace chorus::launcher {
namespace {

using Hosts = std::vector<HostSlots>;

TEST(LauncherHostList, CommaSeparatedWithSlots) {
  EXPECT_EQ(parseHostList("a:2,b:2"), (Hosts{{"a", 2}, {"b", 2}}));
  EXPECT_EQ(parseHostList("node1"), (Hosts{{"node1", 1}}));
  EXPECT_EQ(parseHostList("x:8, y.example.org:8"), (Hosts{{"x", 8}, {"y.example.org", 8}}));
  EXPECT_EQ(parseHostList("h:1,h:1"), (Hosts{{"h", 1}, {"h", 1}}));  // two nodes on one host
}

TEST(LauncherHostList, BadEntriesAreErrors) {
  EXPECT_THROW(parseHostList(""), InvalidArgumentError);
  EXPECT_THROW(parseHostList("a:2,"), InvalidArgumentError);
  EXPECT_THROW(parseHostList("a:0"), InvalidArgumentError);
  EXPECT_THROW(parseHostList("a:x"), InvalidArgumentError);
  EXPECT_THROW(parseHostList("a:2x"), InvalidArgumentError);
  EXPECT_THROW(parseHostList(":4"), InvalidArgumentError);
}

TEST(LauncherHostList, OpenMpiAndMpichHostfiles) {
  EXPECT_EQ(parseHostfile("# cluster\nnode1 slots=4\n\n  node2   slots=4 max_slots=8  # big\n"),
            (Hosts{{"node1", 4}, {"node2", 4}}));
  EXPECT_EQ(parseHostfile("node1:4\r\nnode2:4\n# end"), (Hosts{{"node1", 4}, {"node2", 4}}));
  EXPECT_EQ(parseHostfile("solo"), (Hosts{{"solo", 1}}));
}

TEST(LauncherHostList, BadHostfilesNameTheLine) {
  EXPECT_THROW(parseHostfile("# nothing\n\n"), InvalidArgumentError);
  EXPECT_THROW(parseHostfile("node1 slots=four"), InvalidArgumentError);
  EXPECT_THROW(parseHostfile("node1:4 slots=4"), InvalidArgumentError);
  try {
    parseHostfile("node1 slots=2\nnode2 cpus=2\n");
    FAIL() << "cpus= was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(readHostfile("/nonexistent/hostfile"), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::launcher
