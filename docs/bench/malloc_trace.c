/* LD_PRELOAD logger of malloc, calloc, realloc, free, posix_memalign, memalign and
 * aligned_alloc for docs/bench/malloc_trace.py (docs/estimate.md, "Which glibc mode").
 *
 *   gcc -O2 -shared -fPIC -o malloc_trace.so malloc_trace.c -ldl
 *   MLOG=out.log MLOG_MIN=1024 LD_PRELOAD=./malloc_trace.so python ...
 *
 * One line per call of at least MLOG_MIN bytes (default 64 KiB):
 *   op address bytes chunk-header(hex: size | IS_MMAPPED 2 | NON_MAIN_ARENA 4) thread old/alignment
 * op: m malloc, c calloc, r realloc, f free, a posix_memalign, A memalign/aligned_alloc.
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
void free(void *p) {
  if (!p) return; if ((char*)p >= tmpbuf && (char*)p < tmpbuf + sizeof tmpbuf) return;
  if (!r_free) init();
  size_t h = csize(p) & ~7UL; if (h >= minsz) logit('f', p, h, 0); r_free(p); }
void *realloc(void *o, size_t n) { if (!r_realloc) init(); size_t oh = o ? (csize(o) & ~7UL) : 0; void *p = r_realloc(o, n); if (n >= minsz || oh >= minsz) logit('r', p, n, o); return p; }
int posix_memalign(void **pp, size_t a, size_t n) { if (!r_pm) init(); int r = r_pm(pp, a, n); if (n >= minsz) logit('a', *pp, n, (void*)a); return r; }
void *memalign(size_t a, size_t n) { if (!r_memalign) init(); void *p = r_memalign(a, n); if (n >= minsz) logit('A', p, n, (void*)a); return p; }
void *aligned_alloc(size_t a, size_t n) { if (!r_aligned_alloc) init(); void *p = r_aligned_alloc(a, n); if (n >= minsz) logit('A', p, n, (void*)a); return p; }
