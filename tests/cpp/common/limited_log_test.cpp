// engine_log_line: the engine's log lines are stamped as the Python processes' are (kvstore.log_lines):
// ISO 8601 UTC time to the millisecond, the level, "kvstore engine: ", the line, one newline.
#include "common/limited_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace kvs {
namespace {

TEST(LimitedLog, EngineLinesCarryTheirUtcTimeAndLevel) {
  const std::string line = engine_log_line("WARNING", "refused a peer");
  const std::string stamp = line.substr(0, 24);  // 2026-12-07T18:51:35.123Z
  std::tm when{};
  int millis = -1;
  char zone = 0;
  ASSERT_EQ(std::sscanf(stamp.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &when.tm_year, &when.tm_mon,
                        &when.tm_mday, &when.tm_hour, &when.tm_min, &when.tm_sec, &millis, &zone),
            8)
      << line;
  EXPECT_EQ(zone, 'Z');
  EXPECT_TRUE(millis >= 0 && millis < 1000);
  EXPECT_EQ(line.substr(24), " WARNING kvstore engine: refused a peer\n");
  when.tm_year -= 1900;
  when.tm_mon -= 1;
  const std::time_t stamped = timegm(&when);  // read back as UTC: within a minute of now
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  EXPECT_LE(std::labs(static_cast<long>(now - stamped)), 60L) << line;
}

TEST(LimitedLog, TheLevelIsTheOneGiven) {
  EXPECT_EQ(engine_log_line("ERROR", "x").substr(24), " ERROR kvstore engine: x\n");
}

}  // namespace
}  // namespace kvs
