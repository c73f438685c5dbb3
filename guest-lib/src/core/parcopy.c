/*
 * parcopy.c - large memcpys split across a few threads: host mode's staging
 * copies (staging.c) between the caller's pageable memory and the shared
 * staging slots.
 *
 * Why: a staged copy runs at the speed of the library's memcpy, not the
 * DMA's. On the H200 (2026-11-27) the backend moved a 256 MiB pageable
 * device-to-host copy's chunks at 42 GB/s while the program saw 7.5 GB/s:
 * one thread copying each 4 MiB slot out to the caller's buffer, against
 * 11.7 GB/s for the driver's own pageable copy. One thread's memcpy is
 * bounded by its own load/store bandwidth (read-for-ownership of the
 * destination included), so several threads copying disjoint parts of a
 * chunk finish it sooner while the backend's DMA of the next chunks goes
 * on.
 *
 * How: up to PAR_MAX_THREADS-1 helper threads, started on the first copy
 * that wants them (signals blocked, detached), wait for a job; the caller
 * copies part 0 itself and waits for the helpers' parts. One copy at a
 * time: a copy that finds another under way (or a child of fork(), whose
 * helpers did not follow it) copies alone. The split is on 64-byte
 * boundaries, so no two threads write one cache line. On machines with 4 or
 * more CPUs a helper watches for the next job for PAR_SPIN_NS before it
 * sleeps (a staged copy's chunks come microseconds apart).
 *
 * VGPU_STAGING_THREADS=N (1..PAR_MAX_THREADS) sets the threads per copy, the
 * caller included; by default 8 on machines with 16 or more CPUs, 4 with 8
 * to 15, 2 with 4 to 7, 1 (no helpers) below: on two CPUs the backend needs
 * the other one. On the H100's 16-CPU host, 8 threads moved a 256 MiB
 * pageable D2H at 1.8-3.5x native pageable where 4 moved it at 0.9-2.1x, in
 * three runs (bench/results/2026-11-27-h100-perf2, 2026-11-28-h100-perf3-registry).
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vgpu_internal.h"

#define PAR_MAX_THREADS 8
#define PAR_MIN_PART (512u << 10) /* a part smaller than this is not worth a wake-up */
#define PAR_SPIN_NS 100000u       /* with 4 or more CPUs */

static pthread_mutex_t par_mu = PTHREAD_MUTEX_INITIALIZER; /* one copy at a time */
static unsigned par_threads;  /* threads per copy, caller included; 0 undecided (under par_mu) */
static unsigned par_helpers;  /* helpers running (under par_mu) */
static pid_t par_pid;         /* the process that started them (atomic) */
static uint64_t par_spin_ns;  /* helpers watch for the next job this long before sleeping */

/* The job, under job_mu. */
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cv = PTHREAD_COND_INITIALIZER;  /* a new job */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* job_left reached 0 */
static uint64_t job_gen; /* written under job_mu, read atomically while spinning */
static uint8_t *job_dst;
static const uint8_t *job_src;
static size_t job_n;
static unsigned job_parts, job_left;

/* Part i of parts of an n-byte copy: [*lo, *hi), cut on 64-byte boundaries. */
static void part_range(size_t n, unsigned parts, unsigned i, size_t *lo, size_t *hi)
{
	size_t step = (n / parts) & ~(size_t)63;
	*lo = (size_t)i * step;
	*hi = i + 1 == parts ? n : *lo + step;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *helper_main(void *arg)
{
	unsigned idx = (unsigned)(uintptr_t)arg;
	uint64_t seen = 0;
	pthread_mutex_lock(&job_mu);
	for (;;) {
		if (job_gen == seen && par_spin_ns) {
			/* A staged copy's next chunk comes within microseconds:
			 * watch for it before sleeping. */
			pthread_mutex_unlock(&job_mu);
			uint64_t end = now_ns() + par_spin_ns;
			while (__atomic_load_n(&job_gen, __ATOMIC_ACQUIRE) == seen && now_ns() < end)
				vgpu_cpu_relax();
			pthread_mutex_lock(&job_mu);
		}
		while (job_gen == seen)
			pthread_cond_wait(&job_cv, &job_mu);
		seen = job_gen;
		if (idx >= job_parts)
			continue; /* not needed this time */
		uint8_t *dst = job_dst;
		const uint8_t *src = job_src;
		size_t n = job_n, lo, hi;
		part_range(n, job_parts, idx, &lo, &hi);
		pthread_mutex_unlock(&job_mu);
		memcpy(dst + lo, src + lo, hi - lo);
		pthread_mutex_lock(&job_mu);
		if (--job_left == 0)
			pthread_cond_signal(&done_cv);
	}
	return NULL;
}

unsigned vgpu_copy_threads(void)
{
	const char *e = getenv("VGPU_STAGING_THREADS");
	if (e && *e) {
		long v = strtol(e, NULL, 10);
		if (v >= 1 && v <= PAR_MAX_THREADS)
			return (unsigned)v;
		VINFO("VGPU_STAGING_THREADS=%s is not 1..%d: using the default", e, PAR_MAX_THREADS);
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return cpus >= 16 ? 8 : cpus >= 8 ? 4 : cpus >= 4 ? 2 : 1;
}

/* Under par_mu: starts the helpers the first time; returns the threads a
 * copy may use (1: the caller alone). */
static unsigned pool_ready(void)
{
	if (par_threads)
		return par_helpers + 1;
	par_threads = vgpu_copy_threads();
	if (par_threads < 2)
		return 1;
	par_spin_ns = sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? PAR_SPIN_NS : 0;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the helpers inherit it: no signal lands on them */
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	for (unsigned i = 1; i < par_threads; i++) {
		pthread_t t;
		if (pthread_create(&t, &at, helper_main, (void *)(uintptr_t)i) != 0) {
			VINFO("staging copies: %u helper thread(s) of %u started", par_helpers, par_threads - 1);
			break;
		}
		par_helpers++;
	}
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	__atomic_store_n(&par_pid, getpid(), __ATOMIC_RELEASE);
	return par_helpers + 1;
}

void vgpu_par_copy(void *dst, const void *src, size_t n)
{
	pid_t pid = __atomic_load_n(&par_pid, __ATOMIC_ACQUIRE);
	if (n < 2 * PAR_MIN_PART || (pid && pid != getpid()) || pthread_mutex_trylock(&par_mu) != 0) {
		memcpy(dst, src, n);
		return;
	}
	unsigned parts = pool_ready();
	if (parts > n / PAR_MIN_PART)
		parts = (unsigned)(n / PAR_MIN_PART);
	if (parts < 2) {
		pthread_mutex_unlock(&par_mu);
		memcpy(dst, src, n);
		return;
	}
	pthread_mutex_lock(&job_mu);
	job_dst = dst;
	job_src = src;
	job_n = n;
	job_parts = parts;
	job_left = parts - 1;
	__atomic_store_n(&job_gen, job_gen + 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&job_cv);
	pthread_mutex_unlock(&job_mu);
	size_t lo, hi;
	part_range(n, parts, 0, &lo, &hi);
	memcpy(dst, src, hi);
	pthread_mutex_lock(&job_mu);
	while (job_left)
		pthread_cond_wait(&done_cv, &job_mu);
	pthread_mutex_unlock(&job_mu);
	pthread_mutex_unlock(&par_mu);
}
