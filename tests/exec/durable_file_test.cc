// DurableFile: nothing appears under the final name before publish(); an abandoned file leaves no
// temporary behind; publish replaces an existing file whole; size and CRC-32C follow the writes.
#include "exec/durable_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "exec/crc32c.h"
#include "run_util.h"

namespace loom::exec::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ExecDurableFile, AppearsOnlyWhenPublished) {
  const std::string dir = scratch_dir("durable_publish");
  const std::string path = dir + "/shard.bin";
  std::ofstream(path) << "old contents";
  auto file = DurableFile::create(path);
  ASSERT_TRUE(file) << file.error().message;
  ASSERT_TRUE(file->write("new ", 4));
  ASSERT_TRUE(file->write("contents", 8));
  EXPECT_EQ(file->bytes(), 12);
  EXPECT_EQ(file->crc32c(), crc32c(0, "new contents", 12));
  ASSERT_TRUE(file->finish());
  EXPECT_EQ(slurp(path), "old contents") << "finished but not published: the old file stays";
  EXPECT_EQ(slurp(path + ".tmp"), "new contents");
  ASSERT_TRUE(file->publish());
  EXPECT_EQ(slurp(path), "new contents");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(ExecDurableFile, AbandonedFileLeavesNothing) {
  const std::string dir = scratch_dir("durable_abandon");
  {
    auto file = DurableFile::create(dir + "/a.bin");
    ASSERT_TRUE(file);
    ASSERT_TRUE(file->write("partial", 7));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(ExecDurableFile, UnwritableDirectoryIsAnError) {
  const Status s = write_file_durably("/nonexistent-loom-dir/latest", "step_00000001\n");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("/nonexistent-loom-dir/latest.tmp"), std::string::npos) << s.error().message;
  EXPECT_FALSE(sync_directory("/nonexistent-loom-dir"));
}

}  // namespace
}  // namespace loom::exec::testing
