// libcheck.h: shared helpers for the NVIDIA-library test programs (scripts/cuda-libs).
// Each program tests one NVIDIA library through NVIDIA's own CUDA runtime (nvcc's
// default static runtime) on whatever libcuda.so.1 is found: the real driver or
// vgpu's. It prints one last line, "PASS <name>" or "FAIL <name>: <reason>", and
// exits 0 or 1. Results are checked against a CPU reference, so run on a GPU
// (on vgpu's sim device kernels are not executed and the checks would fail).
#pragma once
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *lc_name = "unnamed";

static inline void lc_begin(const char *name) {
  lc_name = name;
  setvbuf(stdout, NULL, _IOLBF, 0);
}

static inline void lc_die(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("FAIL %s: %s\n", lc_name, msg);
  exit(1);
}

// CK checks a call that returns 0 on success (every NVIDIA library status type).
#define CK(call)                                                                  \
  do {                                                                            \
    long long rc_ = (long long)(call);                                            \
    if (rc_ != 0) lc_die("%s returned %lld (%s:%d)", #call, rc_, __FILE__, __LINE__); \
  } while (0)

// CKRT checks a CUDA runtime call and names its error.
#define CKRT(call)                                                                          \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess)                                                                  \
      lc_die("%s: %s (%s) at %s:%d", #call, cudaGetErrorName(e_), cudaGetErrorString(e_),   \
             __FILE__, __LINE__);                                                           \
  } while (0)

// lc_kernels_run says whether results computed by kernels can be checked: on vgpu's sim
// device (device name contains "vgpu-sim") kernels are not executed, so checks of their
// results are skipped, once saying so ("SKIP-KERNEL-CHECK ..."), and the program tests that
// every library call succeeds.
static inline bool lc_kernels_run(void) {
  static int sim = -1;
  if (sim < 0) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return true;
    sim = strstr(p.name, "vgpu-sim") != NULL;
    if (sim) printf("SKIP-KERNEL-CHECK (sim device: kernels not executed): %s results\n", lc_name);
  }
  return !sim;
}

// lc_close fails unless |got - want| <= tol * max(1, |want|) (not checked on the sim device).
static inline void lc_close(const char *what, int i, double got, double want, double tol) {
  if (!lc_kernels_run()) return;
  double scale = fabs(want) > 1 ? fabs(want) : 1;
  if (!(fabs(got - want) <= tol * scale)) lc_die("%s[%d] = %g, want %g", what, i, got, want);
}

static inline int lc_end(void) {
  printf("PASS %s\n", lc_name);
  return 0;
}

// lc_rand fills with reproducible values in [-1, 1).
static inline void lc_rand(float *v, int n, unsigned seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}
