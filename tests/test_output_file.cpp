// The tools' output files (examples/cli/output_file.hpp) for every kind of path: a regular
// file is replaced whole or not at all; a symbolic link is followed and stays a link; a FIFO,
// a character device and "-" are written straight through and stay what they are; a device
// that fails, a directory and a link loop are clear errors that replace nothing. Every special
// path is made in a scratch directory of the test (device nodes by mknod where the system
// allows it; otherwise the failing device is /dev/full, which the code under test only opens).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../examples/cli/output_file.hpp"
#include "skip.hpp"

namespace fs = std::filesystem;
using ppsched::cli::OutputFile;
using ppsched::cli::write_file_atomically;
using ppsched::cli::write_files_atomically;

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "ppsched-output-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  [[nodiscard]] std::string operator/(const std::string& name) const { return (dir / name).string(); }
  // Entries of the directory: no temporary file may be left behind.
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Everything left in a pipe whose write end is closed; closes the read end.
std::string drain(int fd) {
  std::string got;
  char buf[256];
  for (::ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return got;
}

void write_plain(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("a regular file is replaced whole and keeps its permissions; a new one is created", "[output_file]") {
  Scratch s;
  write_file_atomically(s / "new.csv", "a,b\n");
  CHECK(read(s / "new.csv") == "a,b\n");
  write_plain(s / "old.csv", "old contents that are longer\n");
  REQUIRE(::chmod((s / "old.csv").c_str(), 0640) == 0);
  write_file_atomically(s / "old.csv", "new\n");
  CHECK(read(s / "old.csv") == "new\n");
  CHECK((fs::status(s / "old.csv").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK(s.entries() == std::vector<std::string>{"new.csv", "old.csv"});
}

TEST_CASE("a symbolic link is followed: its target is written and the link stays", "[output_file]") {
  Scratch s;
  fs::create_directory(s.dir / "real");
  write_plain(s / "real/trace.json", "old");
  fs::create_symlink("real/trace.json", s.dir / "link.json");  // relative to the link's directory
  write_file_atomically(s / "link.json", "{}");
  CHECK(fs::is_symlink(fs::symlink_status(s.dir / "link.json")));
  CHECK(read(s / "real/trace.json") == "{}");
  // A chain of links, and a dangling one (its target is created).
  fs::create_symlink(s.dir / "link.json", s.dir / "link2.json");
  write_file_atomically(s / "link2.json", "[1]");
  CHECK(fs::is_symlink(fs::symlink_status(s.dir / "link2.json")));
  CHECK(read(s / "real/trace.json") == "[1]");
  fs::create_symlink("missing.svg", s.dir / "dangling.svg");
  write_file_atomically(s / "dangling.svg", "<svg/>");
  CHECK(fs::is_symlink(fs::symlink_status(s.dir / "dangling.svg")));
  CHECK(read(s / "missing.svg") == "<svg/>");
  // A loop is an error, and replaces nothing.
  fs::create_symlink("loop-b", s.dir / "loop-a");
  fs::create_symlink("loop-a", s.dir / "loop-b");
  const std::string e = error_of([&] { write_file_atomically(s / "loop-a", "x"); });
  CHECK(e.find("symbolic links") != std::string::npos);
  CHECK(fs::is_symlink(fs::symlink_status(s.dir / "loop-a")));
  const auto entries = s.entries();
  CHECK(std::none_of(entries.begin(), entries.end(), [](const std::string& n) { return n.find(".tmp-") != std::string::npos; }));
}

TEST_CASE("a FIFO is written straight through and stays a FIFO", "[output_file]") {
  Scratch s;
  const std::string fifo = s / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] { received = read(fifo); });  // opening for reading pairs with the writer's open
  const std::string content(200'000, 'x');              // more than a pipe's buffer
  write_file_atomically(fifo, content);
  reader.join();
  CHECK(received == content);
  struct ::stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(s.entries() == std::vector<std::string>{"pipe"});
}

TEST_CASE("\"-\" is standard output", "[output_file]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(fds[1], STDOUT_FILENO) >= 0);
  std::string error;
  try {
    write_file_atomically("-", "to stdout\n");
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(fds[1]);
  const std::string got = drain(fds[0]);
  CHECK(error.empty());
  CHECK(got == "to stdout\n");
}

// /dev/stdout with standard output on a pipe: the links end in /proc/self/fd/N, whose target
// ("pipe:[N]") names no file; the tool printed "cannot create a file in '/proc/self/fd'".
// Tagged [may_skip][needs_proc_fd]: it runs as the test output_file_proc_fd (tests/meson.build).
TEST_CASE("a link to a pipe through /proc/self/fd (/dev/stdout under a pipe) is written straight through",
          "[output_file][may_skip][needs_proc_fd]") {
  if (!fs::exists("/proc/self/fd")) PPSCHED_SKIP("no /proc/self/fd on this system");
  Scratch s;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const std::string through_proc = "/proc/self/fd/" + std::to_string(fds[1]);
  fs::create_symlink(through_proc, s.dir / "stdout-like");  // as /dev/stdout -> /proc/self/fd/1
  std::string error;
  try {
    write_files_atomically({OutputFile{through_proc, "one\n"}, OutputFile{s / "stdout-like", "two\n"}});
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::close(fds[1]);
  const std::string got = drain(fds[0]);
  CHECK(error.empty());
  CHECK(got == "one\ntwo\n");
  CHECK(fs::is_symlink(fs::symlink_status(s.dir / "stdout-like")));
  CHECK(s.entries() == std::vector<std::string>{"stdout-like"});
}

// /dev/null and /dev/full are character devices 1:3 and 1:7 on Linux. A node made here keeps the
// tests off the system's own; the writable device is a node made here or nothing (the case
// skips where mknod is not allowed: it runs as the test output_file_mknod, tests/meson.build).
TEST_CASE("a character device is written straight through and stays a device",
          "[output_file][may_skip][needs_mknod]") {
  Scratch s;
  const std::string null_node = s / "null";
  if (::mknod(null_node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    const int error = errno;
    PPSCHED_SKIP("mknod is not allowed here (" << std::strerror(error) << "): no device node to write to");
  }
  write_file_atomically(null_node, "discarded");
  struct ::stat st {};
  REQUIRE(::lstat(null_node.c_str(), &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
}

// Where mknod is not allowed, /dev/full stands in for the failing device (only opened and
// written, never replaced, by the code under test).
TEST_CASE("a failing character device is an error that replaces nothing", "[output_file]") {
  Scratch s;
  const std::string full_node = s / "full";
  const bool node = ::mknod(full_node.c_str(), S_IFCHR | 0666, makedev(1, 7)) == 0;
  const std::string full = node ? full_node : std::string("/dev/full");
  struct ::stat before {};
  REQUIRE(::lstat(full.c_str(), &before) == 0);
  REQUIRE(S_ISCHR(before.st_mode));
  // With a regular output beside it: the device fails, so the regular file is not replaced.
  write_plain(s / "out.csv", "old");
  const std::string e =
      error_of([&] { write_files_atomically({OutputFile{s / "out.csv", "new"}, OutputFile{full, "trace"}}); });
  INFO(e);
  CHECK(e.find(full) != std::string::npos);
  CHECK(e.find(std::strerror(ENOSPC)) != std::string::npos);
  CHECK(read(s / "out.csv") == "old");
  struct ::stat after {};
  REQUIRE(::lstat(full.c_str(), &after) == 0);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_rdev == before.st_rdev);
  const auto entries = s.entries();
  CHECK(std::none_of(entries.begin(), entries.end(), [](const std::string& n) { return n.find(".tmp-") != std::string::npos; }));
}

TEST_CASE("a directory, a missing directory and an empty path are refused by name", "[output_file]") {
  Scratch s;
  fs::create_directory(s.dir / "d");
  CHECK(error_of([&] { write_file_atomically(s / "d", "x"); }).find("is a directory") != std::string::npos);
  CHECK(error_of([&] { write_file_atomically(s / "no/such/dir/f.csv", "x"); }).find("no/such/dir") != std::string::npos);
  CHECK(error_of([&] { write_file_atomically("", "x"); }).find("is not a file name") != std::string::npos);
  CHECK(s.entries() == std::vector<std::string>{"d"});
}
