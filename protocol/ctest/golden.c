/*
 * golden.c - builds the golden frames of protocol/golden_test.go through the
 * generated C header and compares them byte for byte with
 * protocol/testdata/golden/<name>.bin, then checks the golden frames of every
 * row of the call registry (testdata/golden/ops/, table in ops_gen.h) against
 * the opcodes and payload sizes of the C header. Run by `make test`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../vgpu_protocol.h"
#include "ops_gen.h"

struct frame {
	unsigned char buf[4096];
	size_t len;
};

static void begin(struct frame *f, uint16_t op, uint64_t id, uint32_t flags, int32_t status)
{
	struct vgpu_header h = {
		.magic = VGPU_MAGIC, .major = VGPU_PROTO_MAJOR, .minor = VGPU_PROTO_MINOR,
		.opcode = op, .flags = flags, .request_id = id, .status = status,
	};
	memset(f->buf, 0, sizeof(f->buf));
	memcpy(f->buf, &h, sizeof(h));
	f->len = sizeof(h);
}

static void put(struct frame *f, const void *p, size_t n)
{
	memcpy(f->buf + f->len, p, n);
	f->len += n;
}

/* Fix payload length and pad it; must be called before segments. */
static void end_payload(struct frame *f, size_t start)
{
	struct vgpu_header *h = (struct vgpu_header *)(f->buf + start);
	h->payload_len = (uint32_t)(f->len - start - sizeof(*h));
	f->len = (f->len + 7) & ~(size_t)7;
}

static void segments(struct frame *f, size_t start, const struct vgpu_segment *s, uint32_t n)
{
	struct vgpu_header *h = (struct vgpu_header *)(f->buf + start);
	h->num_segs = n;
	h->flags |= VGPU_FLAG_SEGMENTS;
	put(f, s, n * sizeof(*s));
}

static void hello_req(struct frame *f)
{
	struct vgpu_hello_req p = { .major = 1, .minor = 0, .role = VGPU_ROLE_LIBRARY,
		.features = VGPU_FEATURE_BATCH | VGPU_FEATURE_INLINE, .pid = 4242 };
	strcpy((char *)p.client_version, "vgpu-lib 0.1");
	begin(f, VGPU_OP_HELLO, 1, 0, 0);
	put(f, &p, sizeof(p));
	end_payload(f, 0);
}

static void hello_reply(struct frame *f)
{
	struct vgpu_hello_reply p = { .major = 1, .device_count = 1,
		.features = VGPU_FEATURE_BATCH | VGPU_FEATURE_INLINE,
		.max_payload = VGPU_DEFAULT_MAX_PAYLOAD, .max_segments = VGPU_DEFAULT_MAX_SEGMENTS,
		.max_batch = VGPU_MAX_BATCH, .session_id = 7 };
	strcpy((char *)p.backend_version, "vgpu 0.1");
	strcpy((char *)p.device_kind, "sim");
	begin(f, VGPU_OP_HELLO, 1, VGPU_FLAG_REPLY, 0);
	put(f, &p, sizeof(p));
	end_payload(f, 0);
}

static void memcpy_htod_segments(struct frame *f)
{
	struct vgpu_memcpy_htod_req p = { .dst = 0x7f0000001000ull,
		.src = { .kind = VGPU_BUF_SEGMENTS, .index = 0, .len = 12288 } };
	struct vgpu_segment s[2] = { { 0x100000, 4096 }, { 0x200000, 8192 } };
	begin(f, VGPU_OP_MEMCPY_HTOD, 2, 0, 0);
	put(f, &p, sizeof(p));
	end_payload(f, 0);
	segments(f, 0, s, 2);
}

static void memcpy_htod_inline(struct frame *f)
{
	struct vgpu_memcpy_htod_req p = { .dst = 0x7f0000002000ull,
		.src = { .kind = VGPU_BUF_INLINE, .offset = 0, .len = 5 } };
	begin(f, VGPU_OP_MEMCPY_HTOD, 3, 0, 0);
	put(f, &p, sizeof(p));
	put(f, "hello", 5);
	end_payload(f, 0);
}

static void launch_kernel(struct frame *f)
{
	struct vgpu_launch_req p = { .func = 0x10, .grid_x = 1, .grid_y = 1, .grid_z = 1,
		.block_x = 32, .block_y = 1, .block_z = 1, .param_size = 12 };
	uint64_t ptr = 0x7f00001000ull;
	int32_t n = 32;
	begin(f, VGPU_OP_LAUNCH_KERNEL, 4, 0, 0);
	put(f, &p, sizeof(p));
	put(f, &ptr, 8);
	put(f, &n, 4);
	end_payload(f, 0);
}

static void batch_two(struct frame *f)
{
	struct vgpu_batch_req b = { .count = 2 };
	struct vgpu_memset_req ms = { .dst = 0x7f0000003000ull, .count = 64, .value = 0xab,
		.elem_size = 1, .flags = VGPU_COPY_ASYNC };
	struct vgpu_event_record_req er = { .event = 3 };
	size_t sub;

	begin(f, VGPU_OP_BATCH, 5, 0, 0);
	put(f, &b, sizeof(b));
	sub = f->len;
	{
		struct vgpu_header h = { .magic = VGPU_MAGIC, .major = 1, .opcode = VGPU_OP_MEMSET,
			.request_id = 6, .payload_len = sizeof(ms) };
		put(f, &h, sizeof(h));
		put(f, &ms, sizeof(ms));
	}
	sub = f->len;
	{
		struct vgpu_header h = { .magic = VGPU_MAGIC, .major = 1, .opcode = VGPU_OP_EVENT_RECORD,
			.request_id = 7, .payload_len = sizeof(er) };
		put(f, &h, sizeof(h));
		put(f, &er, sizeof(er));
	}
	(void)sub;
	end_payload(f, 0);
}

static void error_reply(struct frame *f)
{
	begin(f, VGPU_OP_MEM_FREE, 8, VGPU_FLAG_REPLY, 1);
	end_payload(f, 0);
}

static void notify_host_func(struct frame *f)
{
	struct vgpu_host_func_notify p = { .callback_id = 99, .stream = 0x20 };
	begin(f, VGPU_OP_NOTIFY_HOST_FUNC, 0, VGPU_FLAG_NOTIFY, 0);
	put(f, &p, sizeof(p));
	end_payload(f, 0);
}

static void notify_output(struct frame *f)
{
	static const char text[] = "vgpu printf probe: tag 7 block 0 thread 0\n";
	struct vgpu_output_notify p = { .stream = VGPU_OUTPUT_STDOUT, .flags = VGPU_OUTPUT_FINAL,
					.len = sizeof(text) - 1 };
	begin(f, VGPU_OP_NOTIFY_OUTPUT, 11, VGPU_FLAG_NOTIFY, 0);
	put(f, &p, sizeof(p));
	put(f, text, sizeof(text) - 1);
	end_payload(f, 0);
}

static void sync_reply_output(struct frame *f)
{
	begin(f, VGPU_OP_DEVICE_SYNCHRONIZE, 11, VGPU_FLAG_REPLY | VGPU_FLAG_OUTPUT, 0);
	end_payload(f, 0);
}

static void host_share(struct frame *f)
{
	struct vgpu_host_share_req p = { .base = 1ull << 40, .size = 2u << 20 };
	begin(f, VGPU_OP_HOST_SHARE, 9, 0, 0);
	put(f, &p, sizeof(p));
	end_payload(f, 0);
}

static void guest_register_host_mapped(struct frame *f)
{
	struct vgpu_guest_register_req p = { .flags = VGPU_REGISTER_MAPPED, .size = 2u << 20 };
	struct vgpu_segment s = { .gpa = 1ull << 40, .len = 2u << 20 };
	begin(f, VGPU_OP_GUEST_REGISTER, 10, 0, 0);
	put(f, &p, sizeof(p));
	end_payload(f, 0);
	segments(f, 0, &s, 1);
}

static void device_get_processes_reply(struct frame *f)
{
	struct vgpu_process_list_reply p = { .count = 2, .total = 2 };
	struct vgpu_process_info e[2] = { { .pid = 812, .used_memory = 1ull << 30 },
					  { .pid = 4242, .used_memory = 512ull << 20 } };
	begin(f, VGPU_OP_DEVICE_GET_PROCESSES, 11, VGPU_FLAG_REPLY, 0);
	put(f, &p, sizeof(p));
	put(f, e, sizeof(e));
	end_payload(f, 0);
}

static void device_get_monitor_reply(struct frame *f)
{
	struct vgpu_device_monitor p = {
		.valid = VGPU_MONITOR_UTILIZATION | VGPU_MONITOR_POWER | VGPU_MONITOR_CLOCK << 1 |
			 VGPU_MONITOR_MAX_CLOCK << 1,
		.gpu_util = 87, .mem_util = 40, .power_milliwatts = 215000,
		.clocks = { [1] = 1755 }, .max_clocks = { [1] = 1980 } };
	begin(f, VGPU_OP_DEVICE_GET_MONITOR, 12, VGPU_FLAG_REPLY, 0);
	put(f, &p, sizeof(p));
	end_payload(f, 0);
}

static const struct {
	const char *name;
	void (*build)(struct frame *f);
} golden[] = {
	{ "hello_req", hello_req },
	{ "hello_reply", hello_reply },
	{ "memcpy_htod_segments", memcpy_htod_segments },
	{ "memcpy_htod_inline", memcpy_htod_inline },
	{ "launch_kernel", launch_kernel },
	{ "batch_two", batch_two },
	{ "error_reply", error_reply },
	{ "notify_host_func", notify_host_func },
	{ "host_share", host_share },
	{ "guest_register_host_mapped", guest_register_host_mapped },
	{ "device_get_processes_reply", device_get_processes_reply },
	{ "device_get_monitor_reply", device_get_monitor_reply },
	{ "notify_output", notify_output },
	{ "sync_reply_output", sync_reply_output },
};

/* Reads the header at b[*off] (n bytes in all) and checks its opcode, flags
 * and payload length; moves *off past the frame. */
static int check_frame(const char *file, const unsigned char *b, size_t n, size_t *off,
		       uint16_t op, uint32_t flags, size_t payload)
{
	struct vgpu_header h;

	if (n - *off < sizeof(h)) {
		fprintf(stderr, "FAIL ops/%s: a frame is cut short at byte %zu\n", file, *off);
		return 1;
	}
	memcpy(&h, b + *off, sizeof(h));
	if (h.magic != VGPU_MAGIC || h.opcode != op || h.flags != flags || h.payload_len != payload ||
	    h.num_segs != 0 || h.status != 0) {
		fprintf(stderr, "FAIL ops/%s: header (opcode %#x, flags %#x, payload %u) at byte %zu; want opcode %#x, flags %#x, payload %zu\n",
			file, h.opcode, h.flags, h.payload_len, *off, op, flags, payload);
		return 1;
	}
	*off += (size_t)vgpu_frame_len(h.payload_len, 0);
	return 0;
}

/* The registry's golden frames: the request (or notification), then the reply. */
static int check_ops(const char *dir, int *passed)
{
	int failed = 0;

	for (size_t i = 0; i < sizeof(op_goldens) / sizeof(op_goldens[0]); i++) {
		const struct op_golden *g = &op_goldens[i];
		unsigned char b[4096];
		char path[512];
		size_t n, off = 0;
		FILE *fp;
		int bad;

		snprintf(path, sizeof(path), "%s/ops/%s.bin", dir, g->file);
		fp = fopen(path, "rb");
		if (!fp) {
			fprintf(stderr, "FAIL ops/%s: cannot open %s\n", g->file, path);
			failed++;
			continue;
		}
		n = fread(b, 1, sizeof(b), fp);
		fclose(fp);
		if (g->reply_size < 0) {
			bad = check_frame(g->file, b, n, &off, g->opcode, VGPU_FLAG_NOTIFY, g->req_size);
		} else {
			bad = check_frame(g->file, b, n, &off, g->opcode, 0, g->req_size) ||
			      check_frame(g->file, b, n, &off, g->opcode, VGPU_FLAG_REPLY, (size_t)g->reply_size);
		}
		if (!bad && off != n) {
			fprintf(stderr, "FAIL ops/%s: %zu bytes after the frames\n", g->file, n - off);
			bad = 1;
		}
		if (bad) {
			failed++;
			continue;
		}
		printf("ok   ops/%s (%zu bytes)\n", g->file, n);
		(*passed)++;
	}
	return failed;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "protocol/testdata/golden";
	int failed = 0, passed = 0;

	for (size_t i = 0; i < sizeof(golden) / sizeof(golden[0]); i++) {
		static struct frame f;
		unsigned char want[4096];
		char path[512];
		FILE *fp;
		size_t n;

		golden[i].build(&f);
		snprintf(path, sizeof(path), "%s/%s.bin", dir, golden[i].name);
		fp = fopen(path, "rb");
		if (!fp) {
			fprintf(stderr, "FAIL %s: cannot open %s\n", golden[i].name, path);
			failed++;
			continue;
		}
		n = fread(want, 1, sizeof(want), fp);
		fclose(fp);
		if (n != f.len || memcmp(want, f.buf, n) != 0) {
			fprintf(stderr, "FAIL %s: C encoding (%zu bytes) differs from %s (%zu bytes)\n",
				golden[i].name, f.len, path, n);
			for (size_t j = 0; j < (n > f.len ? n : f.len); j++)
				if (j >= n || j >= f.len || want[j] != f.buf[j]) {
					fprintf(stderr, "  first difference at byte %zu\n", j);
					break;
				}
			failed++;
			continue;
		}
		printf("ok   %s (%zu bytes)\n", golden[i].name, n);
		passed++;
	}
	failed += check_ops(dir, &passed);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
