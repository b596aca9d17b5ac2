#include "control/exit_record.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace lnetr::control {
namespace {

TEST(ExitRecord, TheCpuRefusal) {
  const auto r = parse_exit_record(
      "time=2026-11-27T16:30:05Z\nresult=exit-code\ncode=exited\nstatus=79\nrestarts=0\n"
      "message=lnetr-dataplane: this CPU lacks ssse3 sse4_1\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(describe(*r), "stopped with exit status 79 at 2026-11-27T16:30:05Z: lnetr-dataplane: this CPU lacks ssse3 sse4_1");
}

TEST(ExitRecord, EveryWayOfStopping) {
  auto d = [](const char* text) { return describe(parse_exit_record(text).value()); };
  EXPECT_EQ(d("time=T\nresult=signal\ncode=killed\nstatus=ILL\nrestarts=3\nmessage=\n"),
            "killed by signal ILL at T after 3 restart(s)");
  EXPECT_EQ(d("time=T\nresult=core-dump\ncode=dumped\nstatus=SEGV\n"), "killed by signal SEGV at T");
  EXPECT_EQ(d("time=T\nresult=watchdog\ncode=killed\nstatus=ABRT\n"),
            "stopped by its watchdog (a worker stopped making progress) at T");
  EXPECT_EQ(d("time=T\nresult=success\ncode=exited\nstatus=0\n"), "stopped at T");
  EXPECT_EQ(d("time=T\nresult=exit-code\ncode=exited\nstatus=2\nmessage=lnetr.yaml:3:5: net: expected a list\n"),
            "stopped with exit status 2 at T: lnetr.yaml:3:5: net: expected a list");
  EXPECT_EQ(d("time=T\nresult=resources\n"), "stopped (resources) at T");
}

TEST(ExitRecord, IncompleteOrMissingIsNone) {
  EXPECT_FALSE(parse_exit_record(""));
  EXPECT_FALSE(parse_exit_record("result=signal\n"));
  EXPECT_FALSE(parse_exit_record("time=T\nno equals sign\n"));
  EXPECT_FALSE(read_exit_record("/nonexistent/dataplane.exit"));
  // A message may hold '=' (only the first splits).
  EXPECT_EQ(parse_exit_record("time=T\nresult=exit-code\nmessage=a=b\n")->message, "a=b");
}

TEST(ExitRecord, ReadFromAFile) {
  char path[] = "/tmp/lnetr-exit-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream f(path);
    f << "time=T\nresult=exit-code\ncode=exited\nstatus=1\n";
  }
  const auto r = read_exit_record(path);
  std::remove(path);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, "1");
}

TEST(ExitRecord, BesideTheControlSocket) {
  EXPECT_EQ(exit_record_path("/run/lnetr/dataplane.sock"), "/run/lnetr/dataplane.exit");
  EXPECT_EQ(exit_record_path("/dataplane.sock"), "/dataplane.exit");
  EXPECT_EQ(exit_record_path("dataplane.sock"), "./dataplane.exit");
}

}  // namespace
}  // namespace lnetr::control
