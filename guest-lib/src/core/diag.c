/*
 * diag.c - logging (VGPU_LOG, VGPU_LOG_FILE) and statistics (VGPU_STATS=1:
 * calls per API, round trips and bytes per opcode, time spent, printed at
 * exit).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "vgpu_internal.h"
#include "core.h"

int vgpu_log_level = VGPU_LOG_WARN;
static FILE *log_out;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int stats_on;
static pthread_mutex_t stat_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_apistat *api_head;
struct vgpu_opstat vgpu_opstats[VGPU_NOPSTAT];

uint64_t vgpu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void print_stats(void);

__attribute__((constructor)) static void diag_init(void)
{
	const char *l = getenv("VGPU_LOG");
	if (l) {
		if (!strcasecmp(l, "error"))
			vgpu_log_level = VGPU_LOG_ERROR;
		else if (!strcasecmp(l, "warn"))
			vgpu_log_level = VGPU_LOG_WARN;
		else if (!strcasecmp(l, "info"))
			vgpu_log_level = VGPU_LOG_INFO;
		else if (!strcasecmp(l, "debug"))
			vgpu_log_level = VGPU_LOG_DEBUG;
		else if (!strcasecmp(l, "none") || !strcasecmp(l, "off"))
			vgpu_log_level = -1;
	}
	const char *f = getenv("VGPU_LOG_FILE");
	if (f && *f) {
		log_out = fopen(f, "ae");
		if (log_out)
			setvbuf(log_out, NULL, _IOLBF, 0);
	}
	const char *s = getenv("VGPU_STATS");
	if (s && *s && strcmp(s, "0") != 0) {
		stats_on = 1;
		atexit(print_stats);
	}
}

void vgpu_logf(int level, const char *fmt, ...)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&log_mu);
	fprintf(log_out ? log_out : stderr, "vgpu[%d] %s: %s\n", (int)getpid(),
		names[level < 0 ? 0 : level > 3 ? 3 : level], buf);
	pthread_mutex_unlock(&log_mu);
}

void vgpu_unsupported(const char *name, int *once)
{
	if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
		VWARN("%s is not supported by vgpu; returning an error", name);
}

void vgpu_unsupported_info(const char *name, int *once)
{
	if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
		VINFO("%s is not supported by vgpu; returning an error", name);
}

struct vgpu_apitimer vgpu_api_enter(struct vgpu_apistat *st)
{
	struct vgpu_apitimer t = {st, 0};
	__atomic_add_fetch(&st->calls, 1, __ATOMIC_RELAXED);
	if (vgpu_log_level >= VGPU_LOG_DEBUG)
		vgpu_logf(VGPU_LOG_DEBUG, "call %s", st->name);
	if (!stats_on)
		return t;
	if (!__atomic_load_n(&st->linked, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&stat_mu);
		if (!st->linked) {
			st->next = api_head;
			api_head = st;
			__atomic_store_n(&st->linked, 1, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&stat_mu);
	}
	t.t0 = vgpu_now_ns();
	return t;
}

void vgpu_api_leave(struct vgpu_apitimer *t)
{
	if (t->t0)
		__atomic_add_fetch(&t->st->ns, vgpu_now_ns() - t->t0, __ATOMIC_RELAXED);
}

struct vgpu_waitstat vgpu_waitstats;
int vgpu_stats_enabled(void) { return stats_on; }

/* vgpuWaitStats(out, size): the ring-wait counters so far (struct
 * vgpu_waitstat in core.h: seven uint64, waits, slept, ns_reply,
 * ns_handoff, reader_sleeps, bells, own; counted with VGPU_STATS=1, else
 * zero; a smaller size gets the first ones). vgpu bench
 * calls prints their change per measurement. Returns 0, or 1 without out. */
VGPU_EXPORT int vgpuWaitStats(void *out, uint64_t size)
{
	if (!out)
		return 1;
	uint64_t v[7] = {
		__atomic_load_n(&vgpu_waitstats.waits, __ATOMIC_RELAXED),
		__atomic_load_n(&vgpu_waitstats.slept, __ATOMIC_RELAXED),
		__atomic_load_n(&vgpu_waitstats.ns_reply, __ATOMIC_RELAXED),
		__atomic_load_n(&vgpu_waitstats.ns_handoff, __ATOMIC_RELAXED),
		__atomic_load_n(&vgpu_waitstats.reader_sleeps, __ATOMIC_RELAXED),
		__atomic_load_n(&vgpu_waitstats.bells, __ATOMIC_RELAXED),
		__atomic_load_n(&vgpu_waitstats.own, __ATOMIC_RELAXED),
	};
	memcpy(out, v, size < sizeof v ? size : sizeof v);
	return 0;
}

void vgpu_opstat_add(uint16_t op, uint64_t bytes_out, uint64_t bytes_in, uint64_t ns, int round_trip)
{
	if (!stats_on)
		return;
	unsigned i = vgpu_opstat_index(op);
	pthread_mutex_lock(&stat_mu);
	vgpu_opstats[i].op = op;
	vgpu_opstats[i].calls++;
	vgpu_opstats[i].round_trips += (uint64_t)round_trip;
	vgpu_opstats[i].bytes_out += bytes_out;
	vgpu_opstats[i].bytes_in += bytes_in;
	vgpu_opstats[i].ns += ns;
	pthread_mutex_unlock(&stat_mu);
}

/* vgpuRoundTrips: the calls of this process that waited for a reply so far
 * (with VGPU_STATS=1; 0 otherwise). Tools sample it around a region, e.g.
 * one training step, to count its synchronous round trips. */
VGPU_EXPORT uint64_t vgpuRoundTrips(void)
{
	uint64_t n = 0;
	pthread_mutex_lock(&stat_mu);
	for (unsigned i = 0; i < VGPU_NOPSTAT; i++)
		n += vgpu_opstats[i].round_trips;
	pthread_mutex_unlock(&stat_mu);
	return n;
}

unsigned vgpu_opstat_index(uint16_t op)
{
	unsigned area = op >> 8, n = op & 0xff;
	if (area >= 16 || n >= 16)
		return VGPU_NOPSTAT - 1;
	return area * 16 + n;
}

static int by_calls(const void *a, const void *b)
{
	const struct vgpu_apistat *x = *(struct vgpu_apistat *const *)a, *y = *(struct vgpu_apistat *const *)b;
	return x->calls < y->calls ? 1 : x->calls > y->calls ? -1 : strcmp(x->name, y->name);
}

static void print_stats(void)
{
	FILE *o = log_out ? log_out : stderr;
	pthread_mutex_lock(&stat_mu);
	size_t n = 0;
	for (struct vgpu_apistat *s = api_head; s; s = s->next)
		n++;
	struct vgpu_apistat **v = calloc(n ? n : 1, sizeof *v);
	n = 0;
	for (struct vgpu_apistat *s = api_head; s && v; s = s->next)
		v[n++] = s;
	if (v)
		qsort(v, n, sizeof *v, by_calls);
	uint64_t total = 0;
	fprintf(o, "vgpu stats (pid %d)\n%-58s %12s %12s\n", (int)getpid(), "API", "calls", "ms");
	for (size_t i = 0; v && i < n; i++) {
		fprintf(o, "%-58s %12llu %12.3f\n", v[i]->name, (unsigned long long)v[i]->calls, (double)v[i]->ns / 1e6);
		total += v[i]->calls;
	}
	free(v);
	fprintf(o, "%-58s %12llu\n", "total API calls", (unsigned long long)total);
	fprintf(o, "%-24s %10s %12s %14s %14s %12s\n", "opcode", "calls", "round-trips", "bytes-out", "bytes-in", "ms");
	uint64_t rt = 0, bo = 0, bi = 0, ns = 0;
	for (unsigned i = 0; i < VGPU_NOPSTAT; i++) {
		struct vgpu_opstat *s = &vgpu_opstats[i];
		if (!s->calls)
			continue;
		fprintf(o, "%-24s %10llu %12llu %14llu %14llu %12.3f\n", vgpu_op_name(s->op),
			(unsigned long long)s->calls, (unsigned long long)s->round_trips,
			(unsigned long long)s->bytes_out, (unsigned long long)s->bytes_in, (double)s->ns / 1e6);
		rt += s->round_trips;
		bo += s->bytes_out;
		bi += s->bytes_in;
		ns += s->ns;
	}
	fprintf(o, "%-24s %10s %12llu %14llu %14llu %12.3f\n", "total", "", (unsigned long long)rt,
		(unsigned long long)bo, (unsigned long long)bi, (double)ns / 1e6);
	fprintf(o, "(round trips: calls that waited for a reply; batched calls travel inside BATCH frames)\n");
	struct vgpu_waitstat w = vgpu_waitstats; /* at exit: the counters are still */
	if (w.waits || w.reader_sleeps || w.bells)
		fprintf(o, "rings: %llu replies waited for, %llu of them asleep (the spin ended first); "
			   "%.2f us from request written to reply handed over, %.2f us from hand-over to the caller running; "
			   "the reader slept %llu times, %llu doorbells rung to the backend, %llu replies read by their caller\n",
			(unsigned long long)w.waits, (unsigned long long)w.slept,
			w.waits ? (double)w.ns_reply / 1e3 / (double)w.waits : 0.0,
			w.waits ? (double)w.ns_handoff / 1e3 / (double)w.waits : 0.0,
			(unsigned long long)w.reader_sleeps, (unsigned long long)w.bells, (unsigned long long)w.own);
	pthread_mutex_unlock(&stat_mu);
	/* the backend's own view of this session: its time vs. the transport's */
	struct vgpu_session_stats b;
	if (vgpu_session_stats(&b) != 0)
		return;
	fprintf(o, "backend: %llu calls, %.3f ms in handlers; HtoD %llu bytes in %.3f ms; DtoH %llu bytes in %.3f ms; "
		   "%llu launches (%llu emulated)\n",
		(unsigned long long)b.calls, (double)b.nanos_in_call / 1e6, (unsigned long long)b.bytes_hto_d,
		(double)b.nanos_hto_d / 1e6, (unsigned long long)b.bytes_dto_h, (double)b.nanos_dto_h / 1e6,
		(unsigned long long)b.launches, (unsigned long long)b.emulated);
	/* the backend's per-layer trace (vgpu serve --trace), if it keeps one */
	if (b.traced)
		fprintf(o, "backend trace, ms over %llu requests: read %.3f, queued %.3f, validate %.3f, "
			   "handler %.3f, reply %.3f\n",
			(unsigned long long)b.traced, (double)b.nanos_read / 1e6, (double)b.nanos_queued / 1e6,
			(double)b.nanos_validate / 1e6, (double)b.nanos_handler / 1e6, (double)b.nanos_reply / 1e6);
}
