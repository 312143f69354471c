// Output files of the command-line tools are written whole or not at all: the content goes
// to a fresh temporary file in the destination's directory, is flushed to disk, and is then
// renamed over the destination in one step (with several files, all are staged before any
// is renamed). A reader (a browser showing the trace, a
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

namespace detail {

// A finished temporary file waiting to be renamed over its destination.
struct StagedFile {
  std::string temporary;
  std::string destination;
};

[[noreturn]] inline void fail_output(const std::string& path, const std::string& problem, const char* fix) {
  fail({ppsched::detail::concat("output file '", path, "'"), problem, "", fix});
}

// Writes `content` to a new temporary file beside `path`, flushed to disk; throws (leaving
// nothing behind) when the directory is missing or unwritable or a write fails.
[[nodiscard]] inline StagedFile stage_file(const std::string& path, std::string_view content) {
  using ppsched::detail::concat;
  namespace fs = std::filesystem;
  const fs::path target(path);
  if (path.empty() || !target.has_filename()) {
    fail_output(path, "is not a file name", "give a path such as out/trace.json");
  }
  const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string pattern = (directory / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0) {
    const int saved = errno;
    fail_output(path, concat("cannot create a file in '", directory.string(), "': ", std::strerror(saved)),
                "write to an existing directory you can write to");
  }
  const std::string temporary(name.data());
  const auto give_up = [&](const char* step, int saved) {
    ::close(fd);
    ::unlink(temporary.c_str());
    fail_output(path, concat(step, " failed: ", std::strerror(saved)),
                "check free space and permissions; the previous file, if any, is unchanged");
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
  // mkstemp creates the file 0600; an output file gets the permissions a plain open would.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) give_up("setting permissions", errno);
  if (::fsync(fd) != 0) give_up("flushing", errno);
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    fail_output(path, concat("closing failed: ", std::strerror(saved)),
                "check free space and permissions; the previous file, if any, is unchanged");
  }
  return {temporary, path};
}

}  // namespace detail

struct OutputFile {
  std::string path;
  std::string content;
};

// Writes every file whole or not at all: each goes to a temporary file in its own
// directory first, and only when all of them are on disk are they renamed into place, so
// a run that cannot write one of its outputs replaces none of them. Throws ppsched::error
// naming the path and the system's reason.
inline void write_files_atomically(const std::vector<OutputFile>& files) {
  std::vector<detail::StagedFile> staged;
  try {
    for (const OutputFile& f : files) staged.push_back(detail::stage_file(f.path, f.content));
  } catch (...) {
    for (const detail::StagedFile& s : staged) ::unlink(s.temporary.c_str());
    throw;
  }
  for (std::size_t i = 0; i < staged.size(); ++i) {
    if (std::rename(staged[i].temporary.c_str(), staged[i].destination.c_str()) != 0) {
      const int saved = errno;
      for (std::size_t j = i; j < staged.size(); ++j) ::unlink(staged[j].temporary.c_str());
      detail::fail_output(staged[i].destination, ppsched::detail::concat("renaming into place failed: ", std::strerror(saved)),
                          "make sure the path is not a directory and its directory is writable");
    }
  }
}

// One file, whole or not at all.
inline void write_file_atomically(const std::string& path, std::string_view content) {
  write_files_atomically({OutputFile{path, std::string(content)}});
}

}  // namespace ppsched::cli
