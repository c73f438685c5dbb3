/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A small stand-in for <kunit/test.h> so vgpu_segs_test.c builds and runs
 * as a host program (the Debian 6.1 guest kernel has no CONFIG_KUNIT). Only
 * what the test file uses is here; kunit_test_suite() becomes main().
 */
#ifndef _KUNIT_HOST_TEST_H
#define _KUNIT_HOST_TEST_H

#include <stdio.h>
#include <string.h>

#define KUNIT_PARAM_DESC_SIZE 128

struct kunit {
	const void *param_value;
	int failures;
};

struct kunit_case {
	void (*run_case)(struct kunit *test);
	const char *name;
	const void *(*generate_params)(const void *prev, char *desc);
};

struct kunit_suite {
	const char *name;
	struct kunit_case *test_cases;
};

#define KUNIT_CASE(fn) { .run_case = fn, .name = #fn }
#define KUNIT_CASE_PARAM(fn, gen) \
	{ .run_case = fn, .name = #fn, .generate_params = gen }

#define KUNIT_ARRAY_PARAM(name, array, get_desc)				\
	static const void *name##_gen_params(const void *prev, char *desc)	\
	{									\
		const __typeof__((array)[0]) *__next = prev ?			\
			((const __typeof__((array)[0]) *)prev) + 1 : (array);	\
		if (__next - (array) < (long)(sizeof(array) / sizeof((array)[0]))) { \
			get_desc(__next, desc);					\
			return __next;						\
		}								\
		return NULL;							\
	}

#define KUNIT_FAIL_AT(test, l, r, ls, rs) do {				\
	printf("    %s:%d: expected %s == %s, got %llu (%#llx) vs %llu (%#llx)\n", \
	       __FILE__, __LINE__, ls, rs, (unsigned long long)(l),		\
	       (unsigned long long)(l), (unsigned long long)(r),		\
	       (unsigned long long)(r));					\
	(test)->failures++;							\
} while (0)

#define KUNIT_EXPECT_EQ(test, a, b) do {					\
	__typeof__(a) __l = (a);						\
	__typeof__(b) __r = (b);						\
	if (!(__l == __r))							\
		KUNIT_FAIL_AT(test, __l, __r, #a, #b);				\
} while (0)

#define KUNIT_ASSERT_EQ(test, a, b) do {					\
	__typeof__(a) __l = (a);						\
	__typeof__(b) __r = (b);						\
	if (!(__l == __r)) {							\
		KUNIT_FAIL_AT(test, __l, __r, #a, #b);				\
		return;								\
	}									\
} while (0)

static inline int kunit_host_run(struct kunit_suite *s)
{
	struct kunit_case *c;
	int failed = 0, ran = 0;

	for (c = s->test_cases; c->run_case; c++) {
		char desc[KUNIT_PARAM_DESC_SIZE];
		const void *p = NULL;

		do {
			struct kunit t = { 0 };

			desc[0] = 0;
			if (c->generate_params) {
				p = c->generate_params(p, desc);
				if (!p)
					break;
			}
			t.param_value = p;
			c->run_case(&t);
			ran++;
			printf("%s %s.%s%s%s\n", t.failures ? "not ok" : "ok",
			       s->name, c->name, desc[0] ? " # " : "", desc);
			failed += !!t.failures;
		} while (c->generate_params);
	}
	printf("%s: %d cases, %d failed\n", s->name, ran, failed);
	return failed != 0;
}

#define kunit_test_suite(s) int main(void) { return kunit_host_run(&(s)); }

#endif
