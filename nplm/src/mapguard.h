/* SIGBUS on a memory-mapped model file, turned into a Python exception.
 *
 * Reading a page of a mapped file that was truncated after it was mapped raises
 * SIGBUS, which kills the process.  The handler below checks that the faulting
 * address lies in a mapping nplm registered (a model file), maps a zero page over
 * the lost page so that the faulting read can complete, and asks Python to run the
 * SIGBUS handler nplm.io._mapguard registered, which raises an exception in the
 * main thread.  A SIGBUS anywhere else goes to the disposition found at install
 * time (the default: the process dies, as without nplm).
 */
#ifndef NPLM_MAPGUARD_H
#define NPLM_MAPGUARD_H

#include <Python.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NPLM_GUARD_SLOTS 4096

static uintptr_t nplm_guard_lo[NPLM_GUARD_SLOTS];
static uintptr_t nplm_guard_hi[NPLM_GUARD_SLOTS];   /* 0: a free slot */
static volatile uintptr_t nplm_guard_fault = 0;
static struct sigaction nplm_guard_previous;
static uintptr_t nplm_guard_page = 4096;

static int nplm_guard_add(uintptr_t lo, uintptr_t hi) {
    for (int i = 0; i < NPLM_GUARD_SLOTS; i++) {
        if (__atomic_load_n(&nplm_guard_hi[i], __ATOMIC_ACQUIRE) == 0) {
            nplm_guard_lo[i] = lo;
            __atomic_store_n(&nplm_guard_hi[i], hi, __ATOMIC_RELEASE);
            return 0;
        }
    }
    return -1;
}

static void nplm_guard_remove(uintptr_t lo) {
    for (int i = 0; i < NPLM_GUARD_SLOTS; i++) {
        if (nplm_guard_lo[i] == lo && __atomic_load_n(&nplm_guard_hi[i], __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&nplm_guard_hi[i], 0, __ATOMIC_RELEASE);
            return;
        }
    }
}

static int nplm_guard_covers(uintptr_t a) {
    for (int i = 0; i < NPLM_GUARD_SLOTS; i++) {
        uintptr_t hi = __atomic_load_n(&nplm_guard_hi[i], __ATOMIC_ACQUIRE);
        if (hi && nplm_guard_lo[i] <= a && a < hi)
            return 1;
    }
    return 0;
}

static void nplm_guard_handler(int sig, siginfo_t *info, void *context) {
    uintptr_t a = (uintptr_t)info->si_addr;
    if (info->si_code > 0 && nplm_guard_covers(a)) {     /* a fault, not a kill() */
        void *page = (void *)(a & ~(nplm_guard_page - 1));
        if (mmap(page, nplm_guard_page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
                != MAP_FAILED) {
            nplm_guard_fault = a;
#if PY_VERSION_HEX >= 0x030A0000
            PyErr_SetInterruptEx(SIGBUS);   /* async-signal-safe; Python 3.10 on */
#endif
            return;
        }
    }
    if (nplm_guard_previous.sa_flags & SA_SIGINFO) {
        nplm_guard_previous.sa_sigaction(sig, info, context);
    } else if (nplm_guard_previous.sa_handler == SIG_IGN && info->si_code <= 0) {
        return;                      /* a kill() of an ignored signal */
    } else if (nplm_guard_previous.sa_handler == SIG_DFL || nplm_guard_previous.sa_handler == SIG_IGN) {
        signal(SIGBUS, SIG_DFL);     /* the default: the process dies, as it would have */
        raise(SIGBUS);
    } else {
        nplm_guard_previous.sa_handler(sig);
    }
}

/* Step 1, before Python's own handler for SIGBUS is set: remember the disposition. */
static int nplm_guard_save_previous(void) {
    return sigaction(SIGBUS, NULL, &nplm_guard_previous);
}

/* Step 2, after it: this handler in front (Python's records the Python function). */
static int nplm_guard_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = nplm_guard_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0)
        nplm_guard_page = (uintptr_t)page;
    return sigaction(SIGBUS, &sa, NULL);
}

static uintptr_t nplm_guard_last_fault(void) {
    return nplm_guard_fault;
}

#endif
