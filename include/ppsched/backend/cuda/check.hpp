// Checked CUDA runtime calls. Every CUDA call in the backend goes through one of these
// macros so that a failure becomes a `ppsched::cuda::cuda_error` naming the call as written, the
// file and line, and CUDA's error name and string — never an ignored status code. Each macro
// evaluates its argument exactly once (the call is passed to a function, not repeated in the
// message). Before throwing, the runtime's last-error slot is cleared with
// `cudaGetLastError()` so that a later, unrelated check does not report this failure again.
// Destructors and other `noexcept` paths use the logging variant, which reports to stderr
// and returns whether the call succeeded.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

// A failed CUDA runtime call. `code()` is the status the call returned, so a caller can
// tell an out-of-memory (recoverable) from a sticky device fault (not recoverable).
class cuda_error : public error {
 public:
  cuda_error(cudaError_t code, const std::string& message) : error(message), code_(code) {}
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

// Errors after which the CUDA context is corrupt: every later call in the process returns
// the same error, so the only fix is a new process.
[[nodiscard]] constexpr bool is_sticky_cuda_error(cudaError_t code) noexcept {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
      return true;
    default:
      return false;
  }
}

}  // namespace cuda
namespace detail {

// What a user can do about the common failures; empty when there is no general advice.
[[nodiscard]] inline std::string cuda_error_fix(cudaError_t code) {
  switch (code) {
    case cudaErrorNoDevice:
      return "No GPU is visible: check CUDA_VISIBLE_DEVICES and that the NVIDIA driver is loaded";
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return "Install an NVIDIA driver that supports the CUDA runtime this program was built with";
    case cudaErrorMemoryAllocation:
      return "Use fewer or smaller micro-batches, or a schedule with a lower activation peak";
    case cudaErrorInvalidDevice:
      return "Use a device index below cudaGetDeviceCount() (mind CUDA_VISIBLE_DEVICES)";
    case cudaErrorNoKernelImageForDevice:
      return "Rebuild with an -arch/-gencode that includes this GPU's compute capability";
    default:
      break;
  }
  if (cuda::is_sticky_cuda_error(code)) {
    return "The CUDA context is now unusable; restart the process (run under compute-sanitizer to find the faulting "
           "kernel)";
  }
  return {};
}

[[nodiscard]] inline std::string describe_cuda_failure(cudaError_t code, const char* call, const char* file, int line) {
  return format_error({detail::concat("CUDA call '", call, "'"),
                       detail::concat("returned ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")"),
                       detail::concat(file, ':', line), cuda_error_fix(code)});
}

[[noreturn]] inline void throw_cuda_failure(cudaError_t code, const char* call, const char* file, int line) {
  // Clear the last-error slot; for a sticky error this is harmless and the next call fails too.
  (void)cudaGetLastError();
  throw cuda::cuda_error(code, describe_cuda_failure(code, call, file, line));
}

inline void check_cuda(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw_cuda_failure(code, call, file, line);
}

// For destructors and noexcept paths: report and carry on. Returns true on success.
inline bool log_cuda(cudaError_t code, const char* call, const char* file, int line) noexcept {
  if (code == cudaSuccess) return true;
  (void)cudaGetLastError();
  std::fprintf(stderr, "ppsched: CUDA call '%s' returned %s (%s) at %s:%d\n", call, cudaGetErrorName(code),
               cudaGetErrorString(code), file, line);
  return false;
}

}  // namespace detail
}  // namespace ppsched

// Throws ppsched::cuda::cuda_error when the call does not return cudaSuccess.
#define PPSCHED_CUDA_CHECK(call) ::ppsched::detail::check_cuda((call), #call, __FILE__, __LINE__)
// Logs to stderr instead of throwing; evaluates to true on success. For destructors.
#define PPSCHED_CUDA_LOG(call) ::ppsched::detail::log_cuda((call), #call, __FILE__, __LINE__)
// Checks the launch of the kernel just issued (launch configuration errors are reported only
// through the last-error slot).
#define PPSCHED_CUDA_CHECK_LAUNCH() \
  ::ppsched::detail::check_cuda(cudaPeekAtLastError(), "kernel launch", __FILE__, __LINE__)
