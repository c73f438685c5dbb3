/*
 * md2.c - MD2 (RFC 1319) and HMAC (RFC 2104) over it: the hash of the
 * integrity check NVIDIA's runtimes ask the driver for (export_tables.c,
 * EXPORT-TABLES.md §2). Written from the RFCs; MD2's block and digest are
 * 16 bytes, so an HMAC-MD2 key of 16 bytes is used as it is.
 */
#include <string.h>

#include "vgpu_internal.h"

/* RFC 1319 section 3.2: the permutation of 0..255 built from the digits of pi. */
static const uint8_t pi_subst[256] = {
	41,  46,  67,  201, 162, 216, 124, 1,	61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,   243,
	192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,	 155, 87,  60,	253, 212, 224, 22,
	103, 66,  111, 24,  138, 23,  229, 18,	190, 78,  196, 214, 218, 158, 222, 73,	160, 251, 245, 142,
	187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137, 11,  34,  95,  33,
	128, 127, 93,  154, 90,	 144, 50,  39,	53,  62,  204, 231, 191, 247, 151, 3,	255, 25,  48,  179,
	72,  165, 181, 209, 215, 94,  146, 42,	172, 86,  170, 198, 79,	 184, 56,  210, 150, 164, 125, 182,
	118, 252, 107, 226, 156, 116, 4,   241, 69,	 157, 112, 89,	100, 113, 135, 32,  134, 91,  207, 101,
	230, 45,  168, 2,   27,	 96,  37,  173, 174, 176, 185, 246, 28,	 70,  97,  105, 52,  64,  126, 15,
	85,  71,  163, 35,  221, 81,  175, 58,	195, 92,  249, 206, 186, 197, 234, 38,	44,  83,  13,  110,
	133, 40,  132, 9,   211, 223, 205, 244, 65,	 129, 77,  82,	106, 220, 55,  200, 108, 193, 171, 250,
	36,  225, 123, 8,   12,	 189, 177, 74,	120, 136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254,
	59,  0,	  29,  57,  242, 239, 183, 14,	102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,
	49,  68,  80,  180, 143, 237, 31,  26,	219, 153, 141, 51,  159, 17,  131, 20,
};

/* Mixes one 16-byte block into the state and the checksum (RFC 1319 3.2, 3.4). */
static void md2_block(struct vgpu_md2 *h, const uint8_t *m)
{
	uint8_t l = h->c[15];
	for (int j = 0; j < 16; j++) {
		h->c[j] ^= pi_subst[m[j] ^ l];
		l = h->c[j];
	}
	for (int j = 0; j < 16; j++) {
		h->x[16 + j] = m[j];
		h->x[32 + j] = (uint8_t)(m[j] ^ h->x[j]);
	}
	uint8_t t = 0;
	for (int j = 0; j < 18; j++) {
		for (int k = 0; k < 48; k++)
			t = h->x[k] ^= pi_subst[t];
		t = (uint8_t)(t + j);
	}
}

void vgpu_md2_init(struct vgpu_md2 *h)
{
	memset(h, 0, sizeof *h);
}

void vgpu_md2_update(struct vgpu_md2 *h, const void *data, size_t len)
{
	const uint8_t *p = data;
	while (len) {
		size_t take = 16 - h->n < len ? 16 - h->n : len;
		memcpy(h->buf + h->n, p, take);
		h->n += (unsigned)take;
		p += take;
		len -= take;
		if (h->n == 16) {
			md2_block(h, h->buf);
			h->n = 0;
		}
	}
}

void vgpu_md2_final(struct vgpu_md2 *h, uint8_t out[16])
{
	uint8_t pad = (uint8_t)(16 - h->n); /* 1..16 bytes, each the count */
	uint8_t padding[16];
	memset(padding, pad, sizeof padding);
	vgpu_md2_update(h, padding, pad);
	uint8_t sum[16];
	memcpy(sum, h->c, 16); /* the checksum of the padded message is the last block */
	md2_block(h, sum);
	memcpy(out, h->x, 16);
}

void vgpu_md2(const void *data, size_t len, uint8_t out[16])
{
	struct vgpu_md2 h;
	vgpu_md2_init(&h);
	vgpu_md2_update(&h, data, len);
	vgpu_md2_final(&h, out);
}

void vgpu_hmac_md2_init(struct vgpu_hmac_md2 *m, const uint8_t key[16])
{
	uint8_t pad[16];
	memcpy(m->key, key, 16);
	for (int i = 0; i < 16; i++)
		pad[i] = key[i] ^ 0x36;
	vgpu_md2_init(&m->inner);
	vgpu_md2_update(&m->inner, pad, sizeof pad);
}

void vgpu_hmac_md2_update(struct vgpu_hmac_md2 *m, const void *data, size_t len)
{
	vgpu_md2_update(&m->inner, data, len);
}

void vgpu_hmac_md2_final(struct vgpu_hmac_md2 *m, uint8_t out[16])
{
	uint8_t inner[16], pad[16];
	struct vgpu_md2 outer;
	vgpu_md2_final(&m->inner, inner);
	for (int i = 0; i < 16; i++)
		pad[i] = m->key[i] ^ 0x5c;
	vgpu_md2_init(&outer);
	vgpu_md2_update(&outer, pad, sizeof pad);
	vgpu_md2_update(&outer, inner, sizeof inner);
	vgpu_md2_final(&outer, out);
}
