/* LD_PRELOAD logger of malloc, calloc, realloc, free, posix_memalign, memalign and
 * aligned_alloc for docs/bench/malloc_trace.py (docs/estimate.md, "Which glibc mode").
 *
 *   gcc -O2 -shared -fPIC -o malloc_trace.so malloc_trace.c -ldl
 *   MLOG=out.log MLOG_MIN=1024 LD_PRELOAD=./malloc_trace.so python ...
 *
 * One line per call of at least MLOG_MIN bytes (default 64 KiB):
 *   op address bytes chunk-header(hex: size | IS_MMAPPED 2 | NON_MAIN_ARENA 4) thread old/alignment
 * op: m malloc, c calloc, r realloc, f free, a posix_memalign, A memalign/aligned_alloc;
 * a free has a seventh field, its chunk's neighbours (see neighbours()).
 * mallocs of 7770..7789 bytes are logged too: the driver's stage markers (small enough to
 * leave glibc's mmap threshold and the heap as they are). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
static void *(*r_malloc)(size_t);
static void (*r_free)(void *);
static void *(*r_calloc)(size_t, size_t);
static void *(*r_realloc)(void *, size_t);
static int (*r_pm)(void **, size_t, size_t);
static void *(*r_memalign)(size_t, size_t);
static void *(*r_aligned_alloc)(size_t, size_t);
static int fd = -1;
static size_t minsz = 65536;
static __thread int busy;
static char tmpbuf[65536]; static size_t tmppos;
static void init(void) {
  static int done; if (done) return; done = 1;
  r_malloc = dlsym(RTLD_NEXT, "malloc"); r_free = dlsym(RTLD_NEXT, "free");
  r_calloc = dlsym(RTLD_NEXT, "calloc"); r_realloc = dlsym(RTLD_NEXT, "realloc");
  r_pm = dlsym(RTLD_NEXT, "posix_memalign"); r_memalign = dlsym(RTLD_NEXT, "memalign");
  r_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  const char *p = getenv("MLOG"); if (p) fd = open(p, O_WRONLY|O_CREAT|O_TRUNC, 0644);
  const char *m = getenv("MLOG_MIN"); if (m) minsz = strtoul(m, 0, 10);
}
static size_t csize(void *p) { return p ? (((size_t *)p)[-1]) : 0; }
static void logit(char op, void *p, size_t n, void *old) {
  if (fd < 0 || busy) return;
  busy = 1;
  char b[160]; size_t h = csize(p);
  int l = snprintf(b, sizeof b, "%c %lx %zu %zx %ld %lx\n", op, (unsigned long)p, n, h, (long)syscall(SYS_gettid), (unsigned long)old);
  write(fd, b, l); busy = 0;
}
void *malloc(size_t n) { if (!r_malloc) { init(); } void *p = r_malloc(n); if (n >= minsz || (n >= 7770 && n < 7790)) logit('m', p, n, 0); return p; }
void *calloc(size_t a, size_t b) {
  if (!r_calloc) { if (tmppos + a*b + 16 > sizeof tmpbuf) return 0; void *p = tmpbuf + tmppos; tmppos += (a*b + 15) & ~15; return p; }
  void *p = r_calloc(a, b); if (a*b >= minsz) logit('c', p, a*b, 0); return p; }
/* a heap chunk's neighbours at its free: the next chunk's size and whether it is in use (the
 * PREV_INUSE bit of the chunk after it: tcache and fastbin chunks count as in use, so 1 means
 * the freed block cannot merge forward), bit 0 of the block's own header (the previous chunk in
 * use) and whether the next chunk sits in the main thread's tcache (-1: unknown); logged as the
 * last field, "nextsize:nextinuse:previnuse:intcache", "-" for mmapped chunks and
 * blocks whose next chunk is the top */
static char *heap0; /* the [heap] start: glibc's tcache_perthread_struct is its first chunk */
static int in_tcache(char *nx, size_t ns) {
  if (!heap0) {
    FILE *f = fopen("/proc/self/maps", "r"); char line[512];
    while (f && fgets(line, sizeof line, f)) if (strstr(line, "[heap]")) { heap0 = (char *)strtoul(line, 0, 16); break; }
    if (f) fclose(f);
  }
  if (!heap0 || (((size_t *)heap0)[1] & ~7UL) != 0x290 || ns < 32 || ns > 1032) return -1;
  unsigned short *counts = (unsigned short *)(heap0 + 16);
  void **entries = (void **)(heap0 + 16 + 128);
  size_t idx = (ns - 17) / 16; char *e = entries[idx];
  for (int k = 0; e && k < counts[idx] + 1 && k < 16; k++) {
    if (e == nx + 16) return 1;
    e = (char *)((((size_t)e) >> 12) ^ *(size_t *)e);
  }
  return 0;
}
/* the main thread's tcache counts of the 48..112-byte bins (the aligned blocks' spares), as
 * six hex digits (7 = full: a spare freed now goes to a fastbin) */
static void tcache_counts(char *out, size_t n) {
  in_tcache(0, 0);
  if (!heap0 || (((size_t *)heap0)[1] & ~7UL) != 0x290) { snprintf(out, n, "-"); return; }
  unsigned short *c = (unsigned short *)(heap0 + 16);
  snprintf(out, n, "%x%x%x%x%x%x", c[1] & 15, c[2] & 15, c[3] & 15, c[4] & 15, c[5] & 15, c[6] & 15);
}
static void neighbours(void *p, char *out, size_t n) {
  size_t h = csize(p); char *c = (char *)p - 16, *nx = c + (h & ~7UL);
  if (h & 2) { snprintf(out, n, "-"); return; }
  size_t ns = ((size_t *)nx)[1] & ~7UL; char *end = sbrk(0);
  if (nx + ns + 16 > end) { snprintf(out, n, "-"); return; }
  snprintf(out, n, "%zu:%d:%d:%d", ns, (int)(((size_t *)(nx + ns))[1] & 1), (int)(h & 1), in_tcache(nx, ns));
}
void free(void *p) {
  if (!p) return; if ((char*)p >= tmpbuf && (char*)p < tmpbuf + sizeof tmpbuf) return;
  if (!r_free) init();
  size_t h = csize(p) & ~7UL;
  if (h >= minsz && fd >= 0 && !busy) {
    char nb[64], b[200]; neighbours(p, nb, sizeof nb); busy = 1;
    int l = snprintf(b, sizeof b, "f %lx %zu %zx %ld 0 %s\n", (unsigned long)p, h, csize(p), (long)syscall(SYS_gettid), nb);
    write(fd, b, l); busy = 0;
  }
  r_free(p); }
void *realloc(void *o, size_t n) { if (!r_realloc) init(); size_t oh = o ? (csize(o) & ~7UL) : 0; void *p = r_realloc(o, n); if (n >= minsz || oh >= minsz) logit('r', p, n, o); return p; }
/* aligned calls log the tcache counts before the call as a seventh field (tcache_counts) and
 * the size of the chunk after the block as the eighth (its trailing spare when one was split) */
static void logal(char op, void *p, size_t n, size_t a, const char *tc) {
  if (fd < 0 || busy) return;
  busy = 1; char b[200]; size_t h = csize(p), ns = 0; char *nx = (char *)p - 16 + (h & ~7UL);
  if (p && !(h & 2) && nx + 16 <= (char *)sbrk(0)) ns = ((size_t *)nx)[1] & ~7UL;
  int l = snprintf(b, sizeof b, "%c %lx %zu %zx %ld %lx %s %zu\n", op, (unsigned long)p, n, h, (long)syscall(SYS_gettid), (unsigned long)a, tc, ns);
  write(fd, b, l); busy = 0;
}
int posix_memalign(void **pp, size_t a, size_t n) { if (!r_pm) init(); char tc[16] = "-"; if (n >= minsz && !busy) tcache_counts(tc, sizeof tc); int r = r_pm(pp, a, n); if (n >= minsz) logal('a', *pp, n, a, tc); return r; }
void *memalign(size_t a, size_t n) { if (!r_memalign) init(); char tc[16] = "-"; if (n >= minsz && !busy) tcache_counts(tc, sizeof tc); void *p = r_memalign(a, n); if (n >= minsz) logal('A', p, n, a, tc); return p; }
void *aligned_alloc(size_t a, size_t n) { if (!r_aligned_alloc) init(); char tc[16] = "-"; if (n >= minsz && !busy) tcache_counts(tc, sizeof tc); void *p = r_aligned_alloc(a, n); if (n >= minsz) logal('A', p, n, a, tc); return p; }
