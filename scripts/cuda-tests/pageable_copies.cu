// pageable_copies: synchronous cudaMemcpy between device memory and plain malloc memory
// (pageable: vgpu's guest driver pins it per call and the backend reads guest RAM by address),
// at sizes scaled to the machine's RAM (MemTotal: a guest's RAM in a guest):
//   1. four live buffers of RAM/32 each (at most 256 MiB, the size that failed on the H100 in an
//      8 GiB guest): two copied to the device back to back, then both copied back into the
//      other two (fresh memory); every byte of the first checked, the tags of the second;
//   2. unaligned: a copy from 1 byte into a buffer to 5 bytes into device memory, odd length,
//      and back to 7 bytes into a buffer, checked, and the bytes around it untouched;
//   3. never-touched memory: a fresh malloc buffer copied to the device, and back into another
//      fresh buffer (the copy is its first write): both read the same;
//   4. one buffer of RAM/2 (at most PAGEABLE_COPIES_MAX_MIB, default 1024, and at most half the
//      free device memory): to the device, then back into fresh memory, every page's tags
//      checked.
// Each phase prints its copy time, apart from the time the program spent filling and checking.
#include "common.h"
#include <stdint.h>
#include <time.h>
#include <unistd.h>

// The pattern: a 1 MiB block of pseudo-random bytes repeated, each 4 KiB page starting with its
// own index and the buffer's seed (and, sparse, ending with them), so a page copied to the wrong
// place is caught as well as a changed byte. memcpy and memcmp keep it fast under TCG; the large
// buffer is filled and checked sparsely (the two tags of each page only), since a TCG guest
// writes and reads its memory at a few hundred MB/s.
static const size_t blk = 1 << 20, pg = 4096;
static unsigned char *block;

static uint64_t tag(size_t page, uint32_t seed) { return ((uint64_t)seed << 32) | (uint32_t)page; }

static void fill(void *buf, size_t n, uint32_t seed, bool sparse) {
  unsigned char *p = (unsigned char *)buf;
  if (!sparse)
    for (size_t off = 0; off < n; off += blk) memcpy(p + off, block, n - off < blk ? n - off : blk);
  for (size_t pi = 0; (pi + 1) * pg <= n; pi++) {
    uint64_t t = tag(pi, seed);
    memcpy(p + pi * pg, &t, 8);
    if (sparse) memcpy(p + pi * pg + pg - 8, &t, 8);
  }
}

// check returns 1 if buf holds fill(buf, n, seed, sparse) (n a multiple of 4 KiB), else records
// the first page that does not.
static int check(const char *what, const void *buf, size_t n, uint32_t seed, bool sparse) {
  const unsigned char *p = (const unsigned char *)buf;
  for (size_t pi = 0; (pi + 1) * pg <= n; pi++) {
    size_t off = pi * pg;
    uint64_t t = tag(pi, seed), got = 0, end = 0;
    memcpy(&got, p + off, 8);
    memcpy(&end, p + off + pg - 8, 8);
    bool ok = got == t && (sparse ? end == t : memcmp(p + off + 8, block + off % blk + 8, pg - 8) == 0);
    if (!ok) {
      t_fail("%s: page %zu (byte offset %zu) differs (tags %#llx %#llx, want %#llx)", what, pi, off,
             (unsigned long long)got, (unsigned long long)end, (unsigned long long)t);
      return 0;
    }
  }
  return 1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *xmalloc(size_t n, const char *what) {
  void *p = malloc(n);
  if (!p) t_die("malloc(%zu) for %s failed", n, what);
  return p;
}

int main() {
  t_begin("pageable_copies");
  const size_t mib = 1 << 20;
  size_t ram = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
  size_t dfree = 0, dtotal = 0;
  t_is_sim_device();
  CHECK(cudaMemGetInfo(&dfree, &dtotal));
  size_t cap = 1024 * mib;
  if (const char *e = getenv("PAGEABLE_COPIES_MAX_MIB")) cap = (size_t)strtoull(e, NULL, 10) * mib;
  block = (unsigned char *)xmalloc(blk, "the pattern");
  for (size_t i = 0; i < blk; i++) block[i] = (unsigned char)(t_hash((unsigned)i) >> 7);

  // 1: four live buffers, two copied to the device back to back, then back.
  size_t n = ram / 32;
  if (n > 256 * mib) n = 256 * mib;
  if (n > cap / 4) n = cap / 4;
  if (n > dfree / 8) n = dfree / 8;
  n &= ~(mib - 1);
  if (n < mib) t_skip("less than 16 MiB of RAM or 8 MiB of free device memory");
  printf("RAM %zu MiB, device memory free %zu MiB; 4 buffers of %zu MiB, large copy up to %zu MiB\n",
         ram / mib, dfree / mib, n / mib, cap / mib);
  double t0 = now();
  unsigned char *h[4];
  for (int i = 0; i < 4; i++) h[i] = (unsigned char *)xmalloc(n, "a live buffer");
  fill(h[0], n, 0x1111, false);
  fill(h[1], n, 0x2222, true);
  char *d[2];
  CHECK(cudaMalloc(&d[0], n));
  CHECK(cudaMalloc(&d[1], n));
  double t1 = now();
  CHECK(cudaMemcpy(d[0], h[0], n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d[1], h[1], n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(h[2], d[0], n, cudaMemcpyDeviceToHost));  // h[2], h[3]: the copy is the first write
  CHECK(cudaMemcpy(h[3], d[1], n, cudaMemcpyDeviceToHost));
  double t2 = now();
  check("back-to-back buffer 1 after the round trip", h[2], n, 0x1111, false);
  check("back-to-back buffer 2 after the round trip", h[3], n, 0x2222, true);
  check("back-to-back buffer 1 (source) unchanged", h[0], n, 0x1111, false);
  printf("back to back: 4 x %zu MiB copied in %.2f s (filling and checking %.2f s)\n", n / mib, t2 - t1,
         now() - t2 + t1 - t0);

  // 2: unaligned offsets and an odd length, across pages (16 MiB at most: the pages are what
  // matter, and TCG checks bytes slowly).
  size_t len = (n < 16 * mib ? n : 16 * mib) - 4096 - 13;
  unsigned char *src = h[0], *dst = h[3];
  memset(dst, 0xEE, len + 4096);
  CHECK(cudaMemcpy(d[1] + 5, src + 1, len, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dst + 7, d[1] + 5, len, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < 7; i++) EXPECT(dst[i] == 0xEE, "unaligned: byte %zu before the copy = %#x", i, dst[i]);
  if (memcmp(dst + 7, src + 1, len) != 0) {
    size_t i = 0;
    while (dst[7 + i] == src[1 + i]) i++;
    t_fail("unaligned: byte %zu of the copy = %#x, want %#x", i, dst[7 + i], src[1 + i]);
  }
  for (size_t i = 7 + len; i < len + 4096; i++)
    if (dst[i] != 0xEE) { t_fail("unaligned: byte %zu after the copy = %#x, want 0xee", i, dst[i]); break; }
  for (int i = 0; i < 4; i++) free(h[i]);

  // 3: memory the program never touched, both directions.
  unsigned char *fresh = (unsigned char *)xmalloc(n, "a fresh buffer");
  CHECK(cudaMemcpy(d[0], fresh, n, cudaMemcpyHostToDevice));
  unsigned char *fresh2 = (unsigned char *)xmalloc(n, "a second fresh buffer");
  CHECK(cudaMemcpy(fresh2, d[0], n, cudaMemcpyDeviceToHost));
  if (memcmp(fresh, fresh2, n) != 0) t_fail("untouched memory: the round trip changed its bytes");
  free(fresh);
  free(fresh2);
  CHECK(cudaFree(d[0]));
  CHECK(cudaFree(d[1]));

  // 4: one large buffer, half the RAM.
  CHECK(cudaMemGetInfo(&dfree, &dtotal));
  size_t big = ram / 2;
  if (big > cap) big = cap;
  if (big > dfree / 2) big = dfree / 2;
  big &= ~(mib - 1);
  if (big >= mib) {
    t0 = now();
    unsigned char *b = (unsigned char *)xmalloc(big, "the large buffer");
    char *db;
    CHECK(cudaMalloc(&db, big));
    fill(b, big, 0x3333, true);
    t1 = now();
    CHECK(cudaMemcpy(db, b, big, cudaMemcpyHostToDevice));
    double th = now();
    free(b); /* back into fresh memory: the copy is its first write */
    b = (unsigned char *)xmalloc(big, "the large buffer, again");
    double t3 = now();
    CHECK(cudaMemcpy(b, db, big, cudaMemcpyDeviceToHost));
    t2 = now();
    check("large buffer after the round trip", b, big, 0x3333, true);
    printf("large copy: %zu MiB to the device in %.2f s, back in %.2f s (filling and checking %.2f s)\n",
           big / mib, th - t1, t2 - t3, (t1 - t0) + (now() - t2));
    CHECK(cudaFree(db));
    free(b);
  }
  free(block);
  return t_end();
}
