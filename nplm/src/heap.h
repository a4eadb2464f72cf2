#ifndef NPLM_HEAP_H
#define NPLM_HEAP_H
#if defined(__GLIBC__)
#include <malloc.h>
static int nplm_trim(void) { return malloc_trim(0); }
#else
static int nplm_trim(void) { return 0; }
#endif
#endif
