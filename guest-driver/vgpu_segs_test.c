// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_segs_test.c - KUnit table tests of the pure helpers in vgpu_segs.c:
 * coalescing physical ranges into segments (never across buffers), the
 * pages a user range spans, the checks on user frames and the number of
 * frames a segment list needs.
 *
 * Built as vgpu_kunit.ko on kernels with CONFIG_KUNIT; tests/kunit_host
 * builds and runs the same file on the host with a small KUnit stand-in.
 */
#include <kunit/test.h>
#include <linux/module.h>
#include <linux/string.h>

#include "vgpu_segs.c"

#define PG 4096ULL

struct vgpu_range {
	u64 phys;
	u64 len;
	bool seal_before;	/* a buffer boundary before this range */
};

struct vgpu_coalesce_case {
	const char *name;
	const struct vgpu_range *in;
	unsigned int nr_in;
	u32 cap;
	int err;			/* from the last add */
	const struct vgpu_segment *out;
	unsigned int nr_out;
};

#define R(...) ((const struct vgpu_range[]){ __VA_ARGS__ })
#define S(...) ((const struct vgpu_segment[]){ __VA_ARGS__ })

static const struct vgpu_coalesce_case vgpu_coalesce_cases[] = {
	{
		.name = "one page",
		.in = R({ 0x10000, PG }), .nr_in = 1, .cap = 4,
		.out = S({ 0x10000, PG }), .nr_out = 1,
	},
	{
		.name = "contiguous pages merge",
		.in = R({ 0x10000, PG }, { 0x11000, PG }, { 0x12000, PG }),
		.nr_in = 3, .cap = 4,
		.out = S({ 0x10000, 3 * PG }), .nr_out = 1,
	},
	{
		.name = "unaligned start and end",
		.in = R({ 0x10ffd, 3 }, { 0x11000, PG }, { 0x12000, 10 }),
		.nr_in = 3, .cap = 4,
		.out = S({ 0x10ffd, 3 + PG + 10 }), .nr_out = 1,
	},
	{
		.name = "descending pages do not merge",
		.in = R({ 0x12000, PG }, { 0x11000, PG }, { 0x10000, PG }),
		.nr_in = 3, .cap = 4,
		.out = S({ 0x12000, PG }, { 0x11000, PG }, { 0x10000, PG }),
		.nr_out = 3,
	},
	{
		.name = "gap splits",
		.in = R({ 0x10000, PG }, { 0x11000, PG }, { 0x20000, PG }, { 0x21000, PG }),
		.nr_in = 4, .cap = 4,
		.out = S({ 0x10000, 2 * PG }, { 0x20000, 2 * PG }), .nr_out = 2,
	},
	{
		.name = "buffer boundary never merges",
		.in = R({ 0x10000, 100 }, { 0x10064, 50, true }),
		.nr_in = 2, .cap = 4,
		.out = S({ 0x10000, 100 }, { 0x10064, 50 }), .nr_out = 2,
	},
	{
		.name = "huge page run",
		.in = R({ 0x200000, 0x200000 }, { 0x400000, 0x200000 }),
		.nr_in = 2, .cap = 1,
		.out = S({ 0x200000, 0x400000 }), .nr_out = 1,
	},
	{
		.name = "full list refuses a new segment",
		.in = R({ 0x10000, PG }, { 0x30000, PG }),
		.nr_in = 2, .cap = 1, .err = -E2BIG,
		.out = S({ 0x10000, PG }), .nr_out = 1,
	},
	{
		.name = "full list still merges",
		.in = R({ 0x10000, PG }, { 0x11000, PG }),
		.nr_in = 2, .cap = 1,
		.out = S({ 0x10000, 2 * PG }), .nr_out = 1,
	},
	{
		.name = "empty range refused",
		.in = R({ 0x10000, 0 }), .nr_in = 1, .cap = 1, .err = -EINVAL,
		.nr_out = 0,
	},
	{
		.name = "wrapping range refused",
		.in = R({ ~0ULL - 10, 100 }), .nr_in = 1, .cap = 1, .err = -EINVAL,
		.nr_out = 0,
	},
};

static void vgpu_coalesce_desc(const struct vgpu_coalesce_case *c, char *desc)
{
	strscpy(desc, c->name, KUNIT_PARAM_DESC_SIZE);
}

KUNIT_ARRAY_PARAM(vgpu_coalesce, vgpu_coalesce_cases, vgpu_coalesce_desc);

static void vgpu_test_coalesce(struct kunit *test)
{
	const struct vgpu_coalesce_case *c = test->param_value;
	struct vgpu_segment segs[8] = {};
	struct vgpu_seg_builder b;
	unsigned int i;
	int err = 0;

	vgpu_segs_init(&b, segs, c->cap);
	for (i = 0; i < c->nr_in; i++) {
		if (c->in[i].seal_before)
			vgpu_segs_seal(&b);
		err = vgpu_segs_add(&b, c->in[i].phys, c->in[i].len);
	}
	KUNIT_EXPECT_EQ(test, err, c->err);
	KUNIT_ASSERT_EQ(test, b.nr, c->nr_out);
	for (i = 0; i < c->nr_out; i++) {
		KUNIT_EXPECT_EQ(test, segs[i].gpa, c->out[i].gpa);
		KUNIT_EXPECT_EQ(test, segs[i].len, c->out[i].len);
	}
}

struct vgpu_span_case {
	const char *name;
	u64 addr, len;
	int err;
	unsigned long first, nr;
};

static const struct vgpu_span_case vgpu_span_cases[] = {
	{ "one byte", 0x1000, 1, 0, 0x1000, 1 },
	{ "last byte of a page", 0x1fff, 1, 0, 0x1000, 1 },
	{ "two bytes across pages", 0x1fff, 2, 0, 0x1000, 2 },
	{ "aligned 64 MiB", 0x40000000, 64ULL << 20, 0, 0x40000000, 16384 },
	{ "unaligned 64 MiB", 0x40000001, 64ULL << 20, 0, 0x40000000, 16385 },
	{ "zero length", 0x1000, 0, -EINVAL, 0, 0 },
	{ "wraps", ~0ULL - 100, 200, -EOVERFLOW, 0, 0 },
	{ "ends in the last page", ~0ULL - 100, 50, -EOVERFLOW, 0, 0 },
};

static void vgpu_span_desc(const struct vgpu_span_case *c, char *desc)
{
	strscpy(desc, c->name, KUNIT_PARAM_DESC_SIZE);
}

KUNIT_ARRAY_PARAM(vgpu_span, vgpu_span_cases, vgpu_span_desc);

static void vgpu_test_span(struct kunit *test)
{
	const struct vgpu_span_case *c = test->param_value;
	unsigned long first = 0, nr = 0;

	KUNIT_EXPECT_EQ(test, vgpu_span_pages(c->addr, c->len, &first, &nr),
			c->err);
	if (!c->err) {
		KUNIT_EXPECT_EQ(test, first, c->first);
		KUNIT_EXPECT_EQ(test, nr, c->nr);
	}
}

enum vgpu_frame_mut {
	VGPU_MUT_NONE,
	VGPU_MUT_SHORT,
	VGPU_MUT_MAGIC,
	VGPU_MUT_MAJOR,
	VGPU_MUT_UNKNOWN_FLAG,
	VGPU_MUT_SEGMENTS_FLAG,
	VGPU_MUT_MORE_FLAG,
	VGPU_MUT_REPLY_FLAG,
	VGPU_MUT_NOTIFY_FLAG,
	VGPU_MUT_NSEGS,
	VGPU_MUT_DRIVER_ID,
	VGPU_MUT_BIG_PAYLOAD,
	VGPU_MUT_LEN_MISMATCH,
	VGPU_MUT_UNPADDED,
	VGPU_MUT_NO_REPLY,
	VGPU_MUT_CONTINUATION,
};

struct vgpu_frame_case {
	const char *name;
	enum vgpu_frame_mut mut;
	int err;
};

static const struct vgpu_frame_case vgpu_frame_cases[] = {
	{ "valid", VGPU_MUT_NONE, 0 },
	{ "shorter than a header", VGPU_MUT_SHORT, -EINVAL },
	{ "bad magic", VGPU_MUT_MAGIC, -EPROTO },
	{ "other major", VGPU_MUT_MAJOR, -EPROTO },
	{ "unknown flag", VGPU_MUT_UNKNOWN_FLAG, -EINVAL },
	{ "segments flag", VGPU_MUT_SEGMENTS_FLAG, -EPERM },
	{ "more-segments flag", VGPU_MUT_MORE_FLAG, -EPERM },
	{ "reply flag", VGPU_MUT_REPLY_FLAG, -EPERM },
	{ "notify flag", VGPU_MUT_NOTIFY_FLAG, -EPERM },
	{ "segment count", VGPU_MUT_NSEGS, -EPERM },
	{ "driver request id", VGPU_MUT_DRIVER_ID, -EINVAL },
	{ "payload over the limit", VGPU_MUT_BIG_PAYLOAD, -E2BIG },
	{ "length disagrees", VGPU_MUT_LEN_MISMATCH, -EBADMSG },
	{ "unpadded length", VGPU_MUT_UNPADDED, 0 },
	{ "no-reply flag", VGPU_MUT_NO_REPLY, 0 },
	{ "continuation frame", VGPU_MUT_CONTINUATION, -EPERM },
};

static void vgpu_frame_desc(const struct vgpu_frame_case *c, char *desc)
{
	strscpy(desc, c->name, KUNIT_PARAM_DESC_SIZE);
}

KUNIT_ARRAY_PARAM(vgpu_frame, vgpu_frame_cases, vgpu_frame_desc);

static void vgpu_test_frame(struct kunit *test)
{
	const struct vgpu_frame_case *c = test->param_value;
	struct vgpu_header h = {
		.magic = VGPU_MAGIC,
		.major = VGPU_PROTO_MAJOR,
		.opcode = VGPU_OP_MEMCPY_HTOD,
		.request_id = 7,
		.payload_len = 13,
	};
	u32 len = VGPU_HEADER_SIZE + 16;

	switch (c->mut) {
	case VGPU_MUT_NONE:
		break;
	case VGPU_MUT_SHORT:
		len = VGPU_HEADER_SIZE - 1;
		break;
	case VGPU_MUT_MAGIC:
		h.magic ^= 1;
		break;
	case VGPU_MUT_MAJOR:
		h.major++;
		break;
	case VGPU_MUT_UNKNOWN_FLAG:
		h.flags = 0x80;
		break;
	case VGPU_MUT_SEGMENTS_FLAG:
		h.flags = VGPU_FLAG_SEGMENTS;
		break;
	case VGPU_MUT_MORE_FLAG:
		h.flags = VGPU_FLAG_MORE_SEGMENTS;
		break;
	case VGPU_MUT_REPLY_FLAG:
		h.flags = VGPU_FLAG_REPLY;
		break;
	case VGPU_MUT_NOTIFY_FLAG:
		h.flags = VGPU_FLAG_NOTIFY;
		break;
	case VGPU_MUT_NSEGS:
		h.num_segs = 1;
		break;
	case VGPU_MUT_DRIVER_ID:
		h.request_id |= VGPU_REQ_DRIVER_BIT;
		break;
	case VGPU_MUT_BIG_PAYLOAD:
		h.payload_len = 4097;
		len = VGPU_HEADER_SIZE + 4104;
		break;
	case VGPU_MUT_LEN_MISMATCH:
		len = VGPU_HEADER_SIZE + 24;
		break;
	case VGPU_MUT_UNPADDED:
		len = VGPU_HEADER_SIZE + 13;
		break;
	case VGPU_MUT_NO_REPLY:
		h.flags = VGPU_FLAG_NO_REPLY;
		break;
	case VGPU_MUT_CONTINUATION:
		h.opcode = VGPU_OP_SEGMENTS;
		break;
	}
	KUNIT_EXPECT_EQ(test, vgpu_check_user_frame(&h, len, 4096), c->err);
}

static void vgpu_test_nr_frames(struct kunit *test)
{
	KUNIT_EXPECT_EQ(test, vgpu_nr_frames(0, 512), 1U);
	KUNIT_EXPECT_EQ(test, vgpu_nr_frames(1, 512), 1U);
	KUNIT_EXPECT_EQ(test, vgpu_nr_frames(512, 512), 1U);
	KUNIT_EXPECT_EQ(test, vgpu_nr_frames(513, 512), 2U);
	KUNIT_EXPECT_EQ(test, vgpu_nr_frames(16384, 512), 32U);
	KUNIT_EXPECT_EQ(test, vgpu_nr_frames(~0U, 1), ~0U);
}

static void vgpu_test_total(struct kunit *test)
{
	const struct vgpu_segment s[] = { { 0, 10 }, { 100, 20 } };
	const struct vgpu_segment o[] = { { 0, ~0ULL }, { 100, 1 } };

	KUNIT_EXPECT_EQ(test, vgpu_segs_total(s, 2), 30ULL);
	KUNIT_EXPECT_EQ(test, vgpu_segs_total(s, 0), 0ULL);
	KUNIT_EXPECT_EQ(test, vgpu_segs_total(o, 2), U64_MAX);
}

struct vgpu_admit_case {
	const char *name;
	bool privileged;
	u32 user_open, total_open, per_user, capacity, reserve;
	int want;
};

static const struct vgpu_admit_case vgpu_admit_cases[] = {
	{ "first open", false, 0, 0, 64, 512, 32, 0 },
	{ "below the user's cap", false, 63, 100, 64, 512, 32, 0 },
	{ "at the user's cap", false, 64, 100, 64, 512, 32, -EMFILE },
	{ "no cap", false, 400, 400, 0, 512, 32, 0 },
	{ "last unreserved file", false, 10, 479, 64, 512, 32, 0 },
	{ "only root's reserve left", false, 10, 480, 64, 512, 32, -EBUSY },
	{ "root past its own count", true, 500, 480, 64, 512, 32, 0 },
	{ "root takes the last port", true, 0, 511, 64, 512, 32, 0 },
	{ "nothing left, even for root", true, 0, 512, 64, 512, 32, -EBUSY },
	{ "a reserve of everything", false, 0, 0, 64, 16, 16, -EBUSY },
	{ "a reserve larger than the ports", false, 0, 0, 64, 16, 100, -EBUSY },
	{ "root with a reserve of everything", true, 0, 0, 64, 16, 16, 0 },
};

static void vgpu_admit_desc(const struct vgpu_admit_case *c, char *desc)
{
	strscpy(desc, c->name, KUNIT_PARAM_DESC_SIZE);
}

KUNIT_ARRAY_PARAM(vgpu_admit, vgpu_admit_cases, vgpu_admit_desc);

static void vgpu_test_admit(struct kunit *test)
{
	const struct vgpu_admit_case *c = test->param_value;

	KUNIT_EXPECT_EQ(test, vgpu_open_admit(c->privileged, c->user_open,
					      c->total_open, c->per_user,
					      c->capacity, c->reserve),
			c->want);
}

static struct kunit_case vgpu_segs_cases[] = {
	KUNIT_CASE_PARAM(vgpu_test_coalesce, vgpu_coalesce_gen_params),
	KUNIT_CASE_PARAM(vgpu_test_span, vgpu_span_gen_params),
	KUNIT_CASE_PARAM(vgpu_test_frame, vgpu_frame_gen_params),
	KUNIT_CASE(vgpu_test_nr_frames),
	KUNIT_CASE(vgpu_test_total),
	KUNIT_CASE_PARAM(vgpu_test_admit, vgpu_admit_gen_params),
	{}
};

static struct kunit_suite vgpu_segs_suite = {
	.name = "vgpu_segs",
	.test_cases = vgpu_segs_cases,
};

kunit_test_suite(vgpu_segs_suite);

MODULE_DESCRIPTION("KUnit tests of the vgpu guest driver's segment helpers");
MODULE_LICENSE("GPL");
