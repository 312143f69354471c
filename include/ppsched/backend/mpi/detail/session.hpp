// Internals of <ppsched/backend/mpi/session.hpp>, which includes this file: the one lock every
// MPI call of the process takes, initialisation and finalisation with the thread support the
// backend needs. They are in ppsched::detail and not part of the API: no example or page uses
// them, and they may change in any release (docs/architecture.md).
#pragma once

#include "ppsched/config.hpp"

// The C bindings only: Open MPI's deprecated C++ bindings warn under -Wextra.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail::mpi {

// Serialises every MPI call ppsched makes in this process.
[[nodiscard]] inline std::mutex& call_mutex() {
  static std::mutex m;
  return m;
}

[[nodiscard]] inline std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return detail::concat("MPI error ", code);
  return std::string(text, static_cast<std::size_t>(length));
}

// How a thread waits between two polls of MPI: yields for the first polls (the answer is
// usually a transfer away), then sleeps, growing to a cap, so that a rank waiting for a peer's
// long compute does not take a core from it. The cap is the latency a transfer may gain when
// it lands while its receiver sleeps. Open MPI progresses only inside MPI calls, so there is
// no blocking wait to use instead.
class Backoff {
 public:
  void pause() {
    if (polls_ < yielding_polls) {
      ++polls_;
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, max_sleep);
  }

  static constexpr int yielding_polls = 200;
  static constexpr std::chrono::microseconds max_sleep{200};

 private:
  int polls_ = 0;
  std::chrono::microseconds sleep_{10};
};

// Set once ppsched knows a process of the job is gone (it never reached a collective step
// within MpiOptions::watchdog): MPI_Finalize, which waits for every process, would then never
// return, so MpiSession's destructor skips it (issue 24).
[[nodiscard]] inline std::atomic<bool>& job_lost() {
  static std::atomic<bool> lost{false};
  return lost;
}

// Throws ppsched::error naming the call when an MPI call did not succeed (the communicators
// ppsched uses return errors instead of aborting the job: MPI_ERRORS_RETURN).
inline void check(int code, const char* call, const std::string& where) {
  if (code == MPI_SUCCESS) return;
  detail::fail({"MPI", detail::concat(call, " failed: ", error_text(code)), where,
        "A peer process may have exited; see the launcher's output (mpirun names the process)"});
}

// A bounded exchange of `bytes` per process over `comm`, written as point-to-point messages so
// that a process that never takes part is named, where a collective call would only hang:
// with root < 0 every process sends `mine` to every other (all-to-all, `all` gets process q's
// bytes at q * bytes); with root >= 0 the root sends `mine` to every other and the others
// receive it into `all` (bytes). Returns the processes whose part had not arrived by
// `deadline` (empty: everything arrived). Then what is pending is cancelled and its storage
// left alive (MPI may still touch it): this happens once per job, on the way to its end.
// Messages of one (source, tag, communicator) never overtake each other, so the exchanges of
// successive steps pair in order.
[[nodiscard]] inline std::vector<int> exchange(MPI_Comm comm, int tag, const void* mine, std::size_t bytes,
                                               void* all, int root, std::chrono::steady_clock::time_point deadline,
                                               const std::string& where) {
  int me = 0, n = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  const auto N = static_cast<std::size_t>(n);
  if (bytes > static_cast<std::size_t>(1 << 30)) {
    detail::fail({"MPI", detail::concat(bytes, " bytes in one exchange"), where, "Exchange less (this is a bug in ppsched)"});
  }
  const int count = static_cast<int>(bytes);
  struct Storage {
    std::vector<char> out, in;
    std::vector<MPI_Request> requests;
    std::vector<int> peer_of;   // each request's peer
    std::vector<bool> is_send;
  };
  auto st = std::make_unique<Storage>();
  // Under the MPI lock: cancels what is pending and leaves the storage alive (see above).
  const auto abandon = [&st] {
    for (MPI_Request& r : st->requests) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    (void)st.release();
  };
  st->out.assign(static_cast<const char*>(mine), static_cast<const char*>(mine) + bytes);
  st->in.assign(root < 0 ? N * bytes : bytes, '\0');
  const bool sends = root < 0 || root == me;
  {
    const std::lock_guard<std::mutex> lock(call_mutex());
    st->requests.reserve(2 * N);  // the requests must not move once posted
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      if (root < 0 || root == q) {
        char* into = st->in.data() + (root < 0 ? static_cast<std::size_t>(q) * bytes : 0);
        st->requests.emplace_back(MPI_REQUEST_NULL);
        st->peer_of.push_back(q);
        st->is_send.push_back(false);
        const int code = MPI_Irecv(into, count, MPI_BYTE, q, tag, comm, &st->requests.back());
        if (code != MPI_SUCCESS) abandon();
        check(code, "MPI_Irecv", where);
      }
      if (sends) {
        st->requests.emplace_back(MPI_REQUEST_NULL);
        st->peer_of.push_back(q);
        st->is_send.push_back(true);
        const int code = MPI_Isend(st->out.data(), count, MPI_BYTE, q, tag, comm, &st->requests.back());
        if (code != MPI_SUCCESS) abandon();
        check(code, "MPI_Isend", where);
      }
    }
  }
  Backoff backoff;
  for (;;) {
    {
      const std::lock_guard<std::mutex> lock(call_mutex());
      int done = 0;
      const int code =
          MPI_Testall(static_cast<int>(st->requests.size()), st->requests.data(), &done, MPI_STATUSES_IGNORE);
      if (code != MPI_SUCCESS) abandon();
      check(code, "MPI_Testall", where);
      if (done != 0) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        // The peers whose part never came; failing that (a root, which only sends), those
        // that never took theirs.
        std::vector<int> missing, untaken;
        for (std::size_t i = 0; i < st->requests.size(); ++i) {
          // MPI_Testall leaves every request as it was until all completed: test each.
          int completed = 0;
          MPI_Test(&st->requests[i], &completed, MPI_STATUS_IGNORE);
          if (completed != 0 || st->requests[i] == MPI_REQUEST_NULL) continue;
          (st->is_send[i] ? untaken : missing).push_back(st->peer_of[i]);
        }
        if (missing.empty()) missing = untaken;
        abandon();
        return missing;
      }
    }
    backoff.pause();
  }
  if (root < 0) {
    std::copy_n(st->out.data(), bytes, st->in.data() + static_cast<std::size_t>(me) * bytes);
    std::copy_n(st->in.data(), N * bytes, static_cast<char*>(all));
  } else if (root != me) {
    std::copy_n(st->in.data(), bytes, static_cast<char*>(all));
  } else {
    std::copy_n(st->out.data(), bytes, static_cast<char*>(all));
  }
  return {};
}

}  // namespace detail::mpi

}  // namespace ppsched
