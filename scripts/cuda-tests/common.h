// common.h: shared helpers for vgpu's own CUDA test programs (scripts/cuda-tests).
//
// Every program:
//   - calls t_begin("<name>") first;
//   - wraps every CUDA runtime call in CHECK(...) (fatal: prints the call, file:line and
//     cudaGetErrorName/String, then "FAIL <name>: ..." and exits 1);
//   - records non-fatal result mismatches with t_fail(...);
//   - guards checks of kernel arithmetic with t_kernels_run("what"): on vgpu's sim device
//     (device name contains "vgpu-sim") kernels are not executed, so the check is skipped and a
//     "SKIP-KERNEL-CHECK (sim device: kernels not executed): what" line is printed;
//   - ends with `return t_end();`, which prints exactly one last line, "PASS <name>" or
//     "FAIL <name>: <first reason>", and returns the exit status (0 or 1).
// A program that cannot test anything on the sim device calls t_skip("reason"): it prints
// "SKIP <name> (reason)" and exits 0.
#pragma once

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *t_name = "unnamed";
static int t_failures = 0;
static char t_first_reason[512];
static int t_sim = -1;  // -1: not yet asked

static inline void t_begin(const char *name) {
  t_name = name;
  setvbuf(stdout, NULL, _IOLBF, 0);
}

// t_die ends the program at once: a fatal check failed.
static inline void t_die(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stdout, "FAIL %s: %s\n", t_name, msg);
  fflush(stdout);
  exit(1);
}

// t_fail records a failed check and carries on; the first reason goes on the final line.
static inline void t_fail(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("check failed: %s\n", msg);
  if (t_failures++ == 0) snprintf(t_first_reason, sizeof t_first_reason, "%s", msg);
}

#define EXPECT(cond, ...)    \
  do {                       \
    if (!(cond)) t_fail(__VA_ARGS__); \
  } while (0)

static inline void t_check_rt(cudaError_t e, const char *call, const char *file, int line) {
  if (e == cudaSuccess) return;
  printf("CUDA error: %s at %s:%d: %s (%d): %s\n", call, file, line, cudaGetErrorName(e), (int)e,
         cudaGetErrorString(e));
  t_die("%s returned %s (%d) at %s:%d", call, cudaGetErrorName(e), (int)e, file, line);
}

#define CHECK(call) t_check_rt((call), #call, __FILE__, __LINE__)

// t_is_sim_device reports whether device 0 is vgpu's sim device (kernels are not executed there).
static inline bool t_is_sim_device(void) {
  if (t_sim < 0) {
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    CHECK(cudaGetDeviceProperties(&p, 0));
    t_sim = strstr(p.name, "vgpu-sim") != NULL;
    printf("device 0: %s (sm_%d%d)%s\n", p.name, p.major, p.minor,
           t_sim ? " [sim: kernel results not checked]" : "");
  }
  return t_sim != 0;
}

// t_kernels_run says whether results computed by kernels can be checked; when not, it says so.
static inline bool t_kernels_run(const char *what) {
  if (!t_is_sim_device()) return true;
  printf("SKIP-KERNEL-CHECK (sim device: kernels not executed): %s\n", what);
  return false;
}

static inline void t_skip(const char *reason) {
  printf("SKIP %s (%s)\n", t_name, reason);
  fflush(stdout);
  exit(0);
}

static inline int t_end(void) {
  if (t_failures) {
    printf("FAIL %s: %s%s\n", t_name, t_first_reason, t_failures > 1 ? " (and more)" : "");
    return 1;
  }
  printf("PASS %s\n", t_name);
  return 0;
}

// t_launch_check checks a kernel launch (the launch error, not its completion).
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

// Deterministic pseudo-random fill (no libc rand state shared between programs).
static inline unsigned t_hash(unsigned x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}
static inline float t_randf(unsigned i) { return (float)(t_hash(i) % 2001) / 1000.0f - 1.0f; }
