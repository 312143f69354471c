// Output files of the command-line tools. A regular file (or a new one) is written whole or
// not at all: the content goes to a fresh temporary file in the destination's directory, is
// flushed to disk, and is then renamed over the destination in one step (with several files,
// all are staged before any is renamed). A reader (a browser showing the trace, a script
// polling for the CSV) therefore sees either the old file or the complete new one, and a
// failure half-way (disk full, a killed process) leaves no truncated output behind.
//
// Not every path is a file to replace. A symbolic link is followed: its target is what gets
// written (renaming over the link would destroy the link and leave its target unchanged). A
// FIFO, a character device (/dev/stdout, /dev/null, a terminal) and `-` (standard output)
// are written straight through, as `cmd > path` would: renaming over them replaced the node
// itself with a regular file (as root, even /dev/full). A directory, a block device or a
// socket is refused with an error naming the path. POSIX only (mkstemp, fsync, rename), like
// the tools themselves.
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
#include "text.hpp"

namespace ppsched::cli {

// A finished temporary file waiting to be renamed over its destination.
struct StagedFile {
  std::string temporary;
  std::string destination;
};

[[noreturn]] inline void fail_output(const std::string& path, const std::string& problem, const char* fix) {
  fail({concat("output file '", path, "'"), problem, "", fix});
}

// Writes `content` to a new temporary file beside `path`, flushed to disk; throws (leaving
// nothing behind) when the directory is missing or unwritable or a write fails.
[[nodiscard]] inline StagedFile stage_file(const std::string& path, std::string_view content) {
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
  // mkstemp creates the file 0600; an output file gets the permissions a plain open would:
  // those of the file it replaces, or 0666 less the umask for a new one.
  mode_t mode = 0;
  struct ::stat existing {};
  if (::stat(path.c_str(), &existing) == 0) {
    mode = existing.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(fd, mode) != 0) give_up("setting permissions", errno);
  if (::fsync(fd) != 0) give_up("flushing", errno);
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    fail_output(path, concat("closing failed: ", std::strerror(saved)),
                "check free space and permissions; the previous file, if any, is unchanged");
  }
  return {temporary, path};
}

// How an output path is written: replaced through a temporary file, or written straight.
enum class OutputKind : unsigned char { replace, stream };

struct ResolvedOutput {
  std::string path;  // a file: after following symbolic links; a stream: as given ("-": stdout)
  OutputKind kind = OutputKind::replace;
};

// The file a plain open() of `path` would write: symbolic links followed (up to 40, as the
// kernel does), relative targets taken from the link's directory. A dangling link resolves to
// the missing target, which is then created.
[[nodiscard]] inline std::string follow_links(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(p, ec);
    if (ec || !fs::is_symlink(st)) return p.string();
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) {
      fail_output(path, concat("cannot read the symbolic link '", p.string(), "': ", ec.message()),
                  "point the path at a file you can write");
    }
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  fail_output(path, "has more than 40 levels of symbolic links (a loop?)", "point the link at a file");
}

[[nodiscard]] inline ResolvedOutput resolve_output(const std::string& path) {
  if (path == "-") return {"-", OutputKind::stream};
  if (path.empty()) fail_output(path, "is not a file name", "give a path such as out/trace.json, or - for stdout");
  // A stream is opened by its own path, the links left to the kernel: /dev/stdout leads to
  // /proc/self/fd/1, whose target, when standard output is a pipe, reads "pipe:[N]" — a name
  // no path walk can follow, but open() can.
  struct ::stat through {};
  if (::stat(path.c_str(), &through) == 0 && (S_ISFIFO(through.st_mode) || S_ISCHR(through.st_mode))) {
    return {path, OutputKind::stream};
  }
  const std::string target = follow_links(path);
  struct ::stat st {};
  if (::stat(target.c_str(), &st) != 0) {
    const int saved = errno;
    if (saved == ENOENT) return {target, OutputKind::replace};  // a new file (its directory is checked later)
    fail_output(path, concat("cannot inspect '", target, "': ", std::strerror(saved)),
                "write to a path in an existing directory you can write to");
  }
  if (S_ISREG(st.st_mode)) return {target, OutputKind::replace};
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return {target, OutputKind::stream};
  if (S_ISDIR(st.st_mode)) {
    fail_output(path, "is a directory", "give a file name, such as DIR/trace.json");
  }
  fail_output(path, S_ISBLK(st.st_mode) ? "is a block device" : "is a socket or another special file",
              "write to a regular file, a FIFO, a character device or - (standard output)");
}

// Writes `content` straight to a FIFO, a character device or standard output ("-"). Opening
// a FIFO waits for a reader, as a shell redirection does.
inline void write_stream(const std::string& shown, const std::string& target, std::string_view content) {
  int fd = STDOUT_FILENO;
  if (target == "-") {
    std::fflush(stdout);  // what the tool printed before comes first
  } else {
    do {
      fd = ::open(target.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      const int saved = errno;
      fail_output(shown, concat("cannot open '", target, "' for writing: ", std::strerror(saved)),
                  "check the permissions of the FIFO or device");
    }
  }
  std::size_t written = 0;
  while (written < content.size()) {
    const ::ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      if (fd != STDOUT_FILENO) ::close(fd);
      fail_output(shown, concat("writing to '", target, "' failed after ", written, " of ", content.size(),
                                " bytes: ", std::strerror(saved)),
                  "check that the reader or device accepts the output");
    }
    written += static_cast<std::size_t>(n);
  }
  if (fd != STDOUT_FILENO && ::close(fd) != 0) {
    const int saved = errno;
    fail_output(shown, concat("closing '", target, "' failed: ", std::strerror(saved)),
                "check that the reader or device accepts the output");
  }
}

struct OutputFile {
  std::string path;
  std::string content;
};

// Writes every file: regular files (and new ones) whole or not at all, FIFOs, character
// devices and "-" straight through, symbolic links followed to their targets (see the top of
// this header). Every path is checked, and every regular file staged in its own directory,
// before anything is written to a stream or renamed into place, so a run that cannot write
// one of its outputs replaces none of its files. Throws ppsched::error naming the path and
// the system's reason.
inline void write_files_atomically(const std::vector<OutputFile>& files) {
  std::vector<ResolvedOutput> resolved;
  for (const OutputFile& f : files) resolved.push_back(resolve_output(f.path));
  std::vector<StagedFile> staged;
  try {
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (resolved[i].kind == OutputKind::replace) {
        staged.push_back(stage_file(resolved[i].path, files[i].content));
      }
    }
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (resolved[i].kind == OutputKind::stream) {
        write_stream(files[i].path, resolved[i].path, files[i].content);
      }
    }
  } catch (...) {
    for (const StagedFile& s : staged) ::unlink(s.temporary.c_str());
    throw;
  }
  for (std::size_t i = 0; i < staged.size(); ++i) {
    if (std::rename(staged[i].temporary.c_str(), staged[i].destination.c_str()) != 0) {
      const int saved = errno;
      for (std::size_t j = i; j < staged.size(); ++j) ::unlink(staged[j].temporary.c_str());
      fail_output(staged[i].destination,
                  concat("renaming into place failed: ", std::strerror(saved)),
                  "make sure the path is not a directory and its directory is writable");
    }
  }
}

// One file, whole or not at all.
inline void write_file_atomically(const std::string& path, std::string_view content) {
  write_files_atomically({OutputFile{path, std::string(content)}});
}

}  // namespace ppsched::cli
