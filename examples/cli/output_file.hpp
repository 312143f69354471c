// Output files of the command-line tools are written whole or not at all: the content goes
// to a fresh temporary file in the destination's directory, is flushed to disk, and is then
// renamed over the destination in one step. A reader (a browser showing the trace, a
// script polling for the CSV) therefore sees either the old file or the complete new one,
// and a failure half-way (disk full, a killed process) leaves no truncated output behind.
// POSIX only (mkstemp, fsync, rename), like the tools themselves.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/error.hpp"

namespace ppsched::cli {

// Writes `content` to `path` atomically; throws ppsched::error naming the path and the
// system's reason when the directory is missing or not writable, or a write fails.
inline void write_file_atomically(const std::string& path, std::string_view content) {
  using ppsched::detail::concat;
  namespace fs = std::filesystem;
  const fs::path target(path);
  if (path.empty() || !target.has_filename()) {
    fail({concat("output file '", path, "'"), "is not a file name", "", "give a path such as out/trace.json"});
  }
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string pattern = (directory / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    const int saved = errno;
    fail({concat("output file '", path, "'"), concat("cannot create a file in '", directory.string(), "': ",
                                                     std::strerror(saved)),
          "", "write to an existing directory you can write to"});
  }
  const std::string temporary(name.data());
  auto give_up = [&](const char* step, int saved) {
    ::close(fd);
    ::unlink(temporary.c_str());
    fail({concat("output file '", path, "'"), concat(step, " failed: ", std::strerror(saved)), "",
          "check free space and permissions; the previous file, if any, is unchanged"});
  };
  std::size_t written = 0;
  while (written < content.size()) {
    const ::ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      give_up("writing", errno);
    }
    written += static_cast<std::size_t>(n);
  }
  // mkstemp creates the file 0600; an output file should have the usual permissions.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) give_up("setting permissions", errno);
  if (::fsync(fd) != 0) give_up("flushing", errno);
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    fail({concat("output file '", path, "'"), concat("closing failed: ", std::strerror(saved)), "",
          "check free space and permissions; the previous file, if any, is unchanged"});
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    fail({concat("output file '", path, "'"), concat("renaming into place failed: ", std::strerror(saved)), "",
          "make sure the path is not a directory and the directory is writable"});
  }
}

}  // namespace ppsched::cli
