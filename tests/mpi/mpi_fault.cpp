// Faults across processes, run under `mpirun -np 4` on a p=4 pipeline of small synthetic
// stages (1F1B, 8 micro-batches).
//
//   mpi_fault throw   rank 2's forward of micro-batch 3 throws in the second step. Every
//                     process must end that step with the same error, the thrower's, naming
//                     rank 2, stage 2, micro-batch 3 and the action; the third step must then
//                     run normally (the backends recovered). Exit 0 when every process saw
//                     exactly that.
//   mpi_fault exit    rank 1's process exits (std::_Exit(3)) inside a forward of the second
//                     step, as a crashed process would. The others must not hang: their
//                     transfers with rank 1 fail within MpiOptions::watchdog and the step's
//                     agreement within it too, or Open MPI's launcher ends the job first.
//                     Each survivor prints its error and exits 4. The test runner checks
//                     the job ends, and how (tests/mpi/meson.build).
//   mpi_fault order   rank 0 sends two transfers to rank 1, which receives them in the other
//                     order. MPI pairs them in posting order, as NCCL does, so the first
//                     receive gets the first send: the receiver must report it, naming both
//                     transfers, instead of taking one micro-batch's data for another's; its
//                     abort then ends rank 0's second send, which no receive will match.
//   mpi_fault compare family|boundary|gradient
//                     the processes are given different setups: another family on process
//                     1, i32 boundaries on process 2 where the others declare f32, a smaller
//                     stage-1 gradient on process 3 (2 replicas of 2 ranks). Every process's
//                     MpiExecutor must throw at once, naming the same first difference (they
//                     failed after the watchdog, exchanged bits silently, or applied a
//                     half-summed gradient).
//   mpi_fault matrix FAULT PHASE [HANG_SECONDS]
//                     2 replicas of 2 ranks (1F1B, 4 micro-batches, 3 steps); one process, the
//                     culprit, faults: FAULT is throw, exit (std::_Exit(3)), signal (SIGKILL),
//                     hang (HANG_SECONDS, 6 by default, then _Exit(5)) or mismatch (its batch, or its schedule); PHASE
//                     is construct (before or while the backend and executor are built), first
//                     (a forward of step 0), mid (a forward of step 1) or sum (stage 0's last
//                     backward of step 1, while the other replica waits in the gradient sum).
//                     The culprit is process 3 (pipeline rank 1 of replica 1), process 2 (rank
//                     0 of replica 1) for sum. Where it survives (throw, mismatch) every process
//                     must end with the same error naming it, no process may apply an
//                     optimizer step of the failed step (AllOrNoneOptimizer), and the next
//                     step must work;
//                     where it dies or hangs each survivor must end within its watchdogs, name
//                     it, print "survivor N named the culprit" and return 4 (run under mpirun
//                     --mca orte_abort_on_non_zero_status 0, so that ppsched's bound is what
//                     ends them; signal is run under the launcher's default, which ends the
//                     job: mpirun 4.1.4 itself hangs after a signal when told to let it run).
//   mpi_fault setup replicas|env
//                     one process's own setup is wrong while the others' is right: rank 1
//                     asks for 3 replicas of the 4 processes (replicas), or rank 2
//                     carries a stale torchrun RANK=0 WORLD_SIZE=4 (env). Every process's
//                     MpiBackend must throw, the failing one its own error and the others
//                     its message with its process named, and the job must end (it hung:
//                     the failing process threw while the others went into the next
//                     collective call). Exit 0 when every process saw exactly that.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <ppsched/backend/mpi.hpp>
#include <ppsched/schedule/generators.hpp>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr std::size_t width = 4;

std::vector<ppsched::StageFunctions> stages(int count, const int& step, bool exit_mode) {
  std::vector<ppsched::StageFunctions> out;
  for (int s = 0; s < count; ++s) {
    ppsched::StageFunctions f;
    f.input_size = width;
    f.output_size = width;
    f.target_size = s + 1 == count ? width : 0;
    f.forward = [s, &step, exit_mode](std::int32_t mb, std::span<const float> in, std::span<float> o) {
      if (step == 1 && !exit_mode && s == 2 && mb == 3) throw std::runtime_error("boom in the forward");
      if (step == 1 && exit_mode && s == 1 && mb == 2) {
        std::fflush(stdout);
        std::_Exit(3);
      }
      for (std::size_t i = 0; i < o.size(); ++i) o[i] = 0.5f * in[i] + 1.0f;
    };
    f.backward = [](std::int32_t, std::span<const float>, std::span<const float> g, std::span<float> gi,
                    std::span<float>) {
      for (std::size_t i = 0; i < gi.size(); ++i) gi[i] = 0.5f * g[i];
    };
    if (s + 1 == count) {
      f.loss = [](std::int32_t, std::span<const float> o, std::span<const float> t, std::span<float> g) {
        float loss = 0.0f;
        for (std::size_t i = 0; i < o.size(); ++i) {
          g[i] = o[i] - t[i];
          loss += g[i] * g[i];
        }
        return loss;
      };
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

// Rank 0 posts A then B to rank 1, which posts B then A: returns this rank's error, if any.
// The job's verdict: every process reports whether its own checks held, rank 0 prints PASS
// or FAIL for all of them, and every process exits with that verdict.
int job_verdict(bool ok, int me) {
  int failures = ok ? 0 : 1;
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) std::printf("%s: %d processes failed their checks\n", total == 0 ? "PASS" : "FAIL", total);
  return total == 0 ? 0 : 1;
}

// Prints this process's check and returns the job's verdict.
int report(bool expected, int me, const std::string& message) {
  std::printf("%s rank %d: '%s'\n", expected ? "ok" : "FAIL", me, message.c_str());
  std::fflush(stdout);
  return job_verdict(expected, me);
}

std::string swapped_order(ppsched::MpiBackend& backend) {
  auto stream = backend.create_stream();
  auto a = backend.allocate(8);
  auto b = backend.allocate(8);
  const ppsched::PeerTag first{1, "SEND_F0@s0"};
  const ppsched::PeerTag second{2, "SEND_F1@s0"};
  try {
    if (backend.rank() == 0) {
      backend.send(a, 8, 1, stream, first);
      backend.send(b, 8, 1, stream, second);
    } else if (backend.rank() == 1) {
      backend.recv(b, 8, 0, stream, {2, "RECV_F1@s1"});
      backend.recv(a, 8, 0, stream, {1, "RECV_F0@s1"});
    }
    (void)backend.synchronize(stream, ppsched::HostWait::within(std::chrono::seconds(30)));
  } catch (const ppsched::error& e) {
    backend.abort("the transfers did not pair");  // as the executor does: the peers stop too
    try {
      (void)backend.synchronize(stream, ppsched::HostWait{});  // drained; throws the sticky error
    } catch (const ppsched::error&) {
    }
    return e.what();
  }
  return "";
}

// One process's setup wrong: every process's MpiBackend throws, naming the cause.
int setup_mode(const char* which) {
  int me = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const bool replicas = std::strcmp(which, "replicas") == 0;
  const int culprit = replicas ? 1 : 2;
  ppsched::MpiOptions mo;
  if (replicas && me == culprit) mo.replicas = 3;
  if (!replicas && me == culprit) {
    ::setenv("RANK", "0", 1);
    ::setenv("WORLD_SIZE", "4", 1);
  }
  std::string message;
  try {
    ppsched::MpiBackend backend(MPI_COMM_WORLD, mo);
  } catch (const ppsched::error& e) {
    message = e.what();
  }
  const std::string cause = replicas ? "3 replicas of a 4-process job" : "torchrun says rank 0 of 4";
  const bool expected = message.find(cause) != std::string::npos &&
                        (me == culprit || message.find("process " + std::to_string(culprit) + " of the job failed its setup") !=
                                              std::string::npos);
  return report(expected, me, message);
}

// The processes are given different setups (issue 24, item 3): process 1 another family
// (family), process 2 i32 boundaries where the others declare f32 (boundary), process 3 (of
// 2 replicas of 2 ranks) a smaller gradient for stage 1 (gradient). Every process's
// MpiExecutor must throw at once, naming the same first difference.
int compare_mode(const char* which) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const bool gradient = std::strcmp(which, "gradient") == 0;
  ppsched::MpiOptions mo;
  mo.replicas = gradient ? 2 : 1;
  ppsched::MpiBackend backend(MPI_COMM_WORLD, mo);
  ppsched::ScheduleRequest req;
  req.ranks = gradient ? 2 : 4;
  req.microbatches = 8;
  const bool family = std::strcmp(which, "family") == 0;
  const ppsched::Schedule schedule = ppsched::make_schedule(family && me == 1 ? "gpipe" : "1f1b", req);
  int step = 0;
  auto functions = stages(schedule.stages(), step, false);
  for (std::size_t s = 0; s < functions.size(); ++s) {
    ppsched::StageFunctions& f = functions[s];
    f.weight_grad_size = gradient && me == 3 && s == 1 ? 2 : 4;
    if (std::strcmp(which, "boundary") == 0) {
      const ppsched::DType dtype = me == 2 ? ppsched::DType::i32 : ppsched::DType::f32;
      f.input_tensors = {{dtype, 8}};
      f.output_tensors = {{dtype, 8}};
      f.input_size = f.output_size = 0;  // typed: the payload's size
    }
  }
  std::string message;
  try {
    ppsched::MpiExecutor executor(backend, schedule, functions);
  } catch (const ppsched::error& e) {
    message = e.what();
  }
  const std::string want = family     ? "process 1's schedule is 'gpipe' (4 ranks, 8 micro-batches, 4 stages) and process 0's '1f1b'"
                           : gradient ? "stage 1's weight gradient is 2 floats on process 3 (replica 1) but 4 on process 1 (replica 0)"
                                      : "stage 1's output is f32 x 8 on process 1 but stage 2's input is i32 x 8 on process 2";
  const bool expected = message.find(want) != std::string::npos;
  return report(expected, me, message);
}


// The fault matrix (see the top of the file).
int matrix_mode(const std::string& fault, const std::string& phase, int hang_seconds) {
  using namespace std::chrono_literals;
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const bool sum = phase == "sum";
  const int culprit = sum ? 2 : 3;
  const bool mine = me == culprit;
  const int fault_step = phase == "first" ? 0 : 1;
  const bool dies = fault == "exit" || fault == "signal" || fault == "hang";
  const auto strike = [&] {
    std::fflush(stdout);
    if (fault == "exit") std::_Exit(3);
    if (fault == "signal") std::raise(SIGKILL);
    if (fault == "hang") {
      std::this_thread::sleep_for(std::chrono::seconds(hang_seconds));
      std::_Exit(5);
    }
    throw std::runtime_error("boom from the fault matrix");
  };
  const std::string name = sum ? "pipeline rank 0 of replica 1 (process 2)" : "pipeline rank 1 of replica 1 (process 3)";
  // A survivor of a process that died names it, and returns (MpiSession must not hang then).
  const auto survivor = [&](const std::string& message, const std::string& want) {
    const bool named = message.find(want) != std::string::npos;
    std::printf("%s %d %s: '%s'\n", named ? "survivor" : "FAIL: survivor", me,
                named ? "named the culprit" : "did not name the culprit", message.c_str());
    std::fflush(stdout);
    return 4;
  };
  if (phase == "construct" && mine && dies) strike();
  ppsched::MpiOptions mo;
  mo.replicas = 2;
  mo.watchdog = 2500ms;
  std::string message;
  std::unique_ptr<ppsched::MpiBackend> backend;
  try {
    backend = std::make_unique<ppsched::MpiBackend>(MPI_COMM_WORLD, mo);
  } catch (const ppsched::error& e) {
    message = e.what();
  }
  if (!backend) return dies ? survivor(message, "process " + std::to_string(culprit) + " never reached") : report(false, me, message);
  ppsched::ScheduleRequest req;
  req.ranks = 2;
  req.microbatches = 4;
  const bool other_schedule = phase == "construct" && fault == "mismatch" && mine;
  const ppsched::Schedule schedule = ppsched::make_schedule(other_schedule ? "gpipe" : "1f1b", req);
  int step = 0;
  int applied_steps = 0;  // this process's optimizer steps, committed all-or-none
  std::vector<ppsched::StageFunctions> functions;
  for (int s = 0; s < 2; ++s) {
    ppsched::StageFunctions f;
    f.input_size = f.output_size = width;
    f.target_size = s == 1 ? width : 0;
    f.weight_grad_size = width;
    const bool strikes_here = mine && (sum ? s == 0 : s == 1);
    f.forward = [&, s, strikes_here](std::int32_t mb, std::span<const float> in, std::span<float> o) {
      if (strikes_here && !sum && step == fault_step && mb == (phase == "first" ? 1 : 2) && fault != "mismatch") strike();
      for (std::size_t i = 0; i < o.size(); ++i) o[i] = 0.5f * in[i] + static_cast<float>(s);
    };
    f.backward = [&, strikes_here](std::int32_t mb, std::span<const float> in, std::span<const float> g,
                                   std::span<float> gi, std::span<float> gw) {
      if (strikes_here && sum && step == fault_step && mb == 3) strike();
      for (std::size_t i = 0; i < gi.size(); ++i) gi[i] = 0.5f * g[i];
      for (std::size_t i = 0; i < gw.size(); ++i) gw[i] += g[i] * in[i];
    };
    if (s == 1) {
      f.loss = [](std::int32_t, std::span<const float> o, std::span<const float> t, std::span<float> g) {
        float loss = 0.0f;
        for (std::size_t i = 0; i < o.size(); ++i) {
          g[i] = o[i] - t[i];
          loss += g[i] * g[i];
        }
        return loss;
      };
    }
    f.optimizer_step = [&applied = applied_steps](std::span<const float>) { ++applied; };
    // A stage without its forward: this process's executor fails to build.
    if (phase == "construct" && fault == "throw" && strikes_here) f.forward = nullptr;
    functions.push_back(std::move(f));
  }
  ppsched::ExecutorOptions eo;
  eo.watchdog = 30s;  // healthy steps on a loaded machine; the faulty one runs under 1 s
  ppsched::AllOrNoneOptimizer optimizer;
  functions = optimizer.defer(std::move(functions));
  std::unique_ptr<ppsched::MpiExecutor> executor;
  try {
    executor = std::make_unique<ppsched::MpiExecutor>(*backend, schedule, functions, eo);
  } catch (const ppsched::error& e) {
    message = e.what();
  }
  if (!executor) {
    const std::string want = fault == "throw" ? (mine ? "forward" : name + " failed to build its executor")
                                              : "process 3's schedule is 'gpipe'";
    return report(phase == "construct" && message.find(want) != std::string::npos, me, message);
  }
  const std::vector<float> inputs(4 * width, 1.0f), targets(4 * width, 0.0f);
  const std::vector<float> short_targets(3 * width, 0.0f);  // the culprit (a last stage) reads them
  bool ok = true;
  for (step = 0; step < 3; ++step) {
    executor->executor().set_watchdog(step == fault_step ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(30'000));
    const bool bad_batch = fault == "mismatch" && mine && step == fault_step;
    message.clear();
    try {
      (void)optimizer.step([&]() -> const ppsched::RankStep& {
        return executor->run_step({inputs, bad_batch ? short_targets : targets});
      });
    } catch (const ppsched::error& e) {
      message = e.what();
    }
    if (dies && step == fault_step) return survivor(message, name + " did not");
    // Every process commits its optimizer step of a step that succeeded everywhere, and none of
    // the failed one (which, undeferred, the processes that had finished applied).
    const int committed = step < fault_step ? step + 1 : step;
    if (applied_steps != committed) {
      std::printf("FAIL rank %d: %d optimizer steps applied after step %d, expected %d\n", me, applied_steps, step,
                  committed);
      ok = false;
    }
    if (step != fault_step) {
      if (!message.empty()) std::printf("FAIL rank %d: step %d should succeed: %s\n", me, step, message.c_str());
      ok = ok && message.empty();
      continue;
    }
    const std::string cause = fault == "mismatch" ? "has 12 target floats" : "boom from the fault matrix";
    const bool named = message.rfind(name + ": ", 0) == 0 && message.find(cause) != std::string::npos;
    if (!named) std::printf("FAIL rank %d: step %d's error does not name the culprit: '%s'\n", me, step, message.c_str());
    ok = ok && named;
    std::vector<char> first(4096, '\0');
    if (me == 0) std::strncpy(first.data(), message.c_str(), first.size() - 1);
    MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (message != first.data()) std::printf("FAIL rank %d: '%s' differs from rank 0's\n", me, message.c_str());
    ok = ok && message == first.data();
    if (me == 0) std::printf("every process ended step %d with: %s\n", step, message.c_str());
  }
  if (dies) {
    std::printf("FAIL rank %d: the fault never struck\n", me);
    return 1;
  }
  return job_verdict(ok, me);
}

int main(int argc, char** argv) {
  const bool exit_mode = argc > 1 && std::strcmp(argv[1], "exit") == 0;
  const bool order_mode = argc > 1 && std::strcmp(argv[1], "order") == 0;
  ppsched::mpi::MpiSession session(&argc, &argv);
  if (argc > 2 && std::strcmp(argv[1], "setup") == 0) return setup_mode(argv[2]);
  if (argc > 2 && std::strcmp(argv[1], "compare") == 0) return compare_mode(argv[2]);
  if (argc > 3 && std::strcmp(argv[1], "matrix") == 0) return matrix_mode(argv[2], argv[3], argc > 4 ? std::atoi(argv[4]) : 6);
  ppsched::MpiOptions mo;
  mo.watchdog = std::chrono::milliseconds(exit_mode ? 3'000 : 60'000);
  ppsched::MpiBackend backend(MPI_COMM_WORLD, mo);
  const int me = backend.rank();
  if (backend.ranks() != 4) {
    if (me == 0) std::printf("FAIL: run with mpirun -np 4\n");
    return 1;
  }
  if (order_mode) {
    const std::string message = swapped_order(backend);
    const bool expected = me == 1 ? message.find("receive 'RECV_F1@s1' from rank 0 (8 floats) was paired with rank 0's "
                                                 "send of 8 floats: they belong to different transfers") != std::string::npos
                    : me == 0 ? message.find("the step was ended by rank 1, which failed") != std::string::npos
                              : message.empty();
    return report(expected, me, message);
  }
  ppsched::ScheduleRequest req;
  req.ranks = 4;
  req.microbatches = 8;
  const ppsched::Schedule schedule = ppsched::make_schedule("1f1b", req);
  int step = 0;
  const auto functions = stages(schedule.stages(), step, exit_mode);
  ppsched::ExecutorOptions eo;
  // Short only where a process dies (the bound under test); elsewhere a loaded machine must
  // not fire it in a healthy step.
  eo.watchdog = std::chrono::milliseconds(exit_mode ? 2'000 : 30'000);
  ppsched::MpiExecutor executor(backend, schedule, functions, eo);
  const std::vector<float> inputs(8 * width, 1.0f);
  const std::vector<float> targets(8 * width, 0.0f);

  bool ok = true;
  for (step = 0; step < 3; ++step) {
    std::string message;
    try {
      (void)executor.run_step({inputs, targets});
    } catch (const ppsched::error& e) {
      message = e.what();
    }
    if (exit_mode) {
      if (!message.empty()) {
        std::printf("rank %d step %d ended: %s\n", me, step, message.c_str());
        std::fflush(stdout);
        // Not MpiSession::abort_job: mpirun 4.1.4, told to let the job run on after a process
        // exited, crashed (SIGSEGV in pmix_server_log) when several survivors called MPI_Abort.
        std::_Exit(4);
      }
      continue;
    }
    if (step != 1) {
      if (!message.empty()) std::printf("FAIL rank %d: step %d should succeed: %s\n", me, step, message.c_str());
      ok = ok && message.empty();
      continue;
    }
    const bool named = message.find("rank 2, stage 2, micro-batch 3") != std::string::npos &&
                       message.find("F3@s2") != std::string::npos &&
                       message.find("boom in the forward") != std::string::npos;
    if (!named) std::printf("FAIL rank %d: step 1's error does not name the thrower: '%s'\n", me, message.c_str());
    ok = ok && named;
    // Every process holds the same text: compare with rank 0's.
    std::vector<char> first(4096, '\0');
    if (me == 0) std::strncpy(first.data(), message.c_str(), first.size() - 1);
    MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (message != first.data()) std::printf("FAIL rank %d: '%s' differs from rank 0's\n", me, message.c_str());
    ok = ok && message == first.data();
    if (me == 0) std::printf("every process ended step 1 with: %s\n", message.c_str());
  }
  if (exit_mode) {
    std::printf("FAIL rank %d: finished every step although rank 1 exited\n", me);
    return 1;
  }
  return job_verdict(ok, me);
}
