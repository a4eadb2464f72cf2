/* SIGBUS on a memory-mapped model file, turned into a Python exception.
 *
 * Reading a page of a mapped file that was truncated after it was mapped raises
 * SIGBUS in the thread that read it, which kills the process.  The handler below
 * checks that the faulting address lies in a mapping nplm registered (a model file),
 * maps a zero page over the lost page so that the faulting read can complete, marks
 * the mapping damaged and counts the fault.  The models check the count around every
 * call (nplm._kernels.ModelBase): a call during which, or after which, one of its
 * own mappings was damaged raises MappedFileChanged in the calling thread, whichever
 * thread (or OpenMP worker) read the lost page; the zeros read are never returned.
 * A SIGBUS anywhere else goes to the disposition found at install time (the
 * default: the process dies, as without nplm).  Installed with sigaction, which
 * any thread may call.
 */
#ifndef NPLM_MAPGUARD_H
#define NPLM_MAPGUARD_H

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NPLM_GUARD_SLOTS 4096

static uintptr_t nplm_guard_lo[NPLM_GUARD_SLOTS];
static uintptr_t nplm_guard_hi[NPLM_GUARD_SLOTS];   /* 0: a free slot */
static volatile uint8_t nplm_guard_damage[NPLM_GUARD_SLOTS];
static volatile uint64_t nplm_guard_fault_count = 0;
static struct sigaction nplm_guard_previous;
static uintptr_t nplm_guard_page = 4096;
static int nplm_guard_installed = 0;

/* Register [lo, hi); the slot, or -1 when all are taken. */
static inline int nplm_guard_add(uintptr_t lo, uintptr_t hi) {
    for (int i = 0; i < NPLM_GUARD_SLOTS; i++) {
        uintptr_t free_slot = 0;
        if (__atomic_load_n(&nplm_guard_hi[i], __ATOMIC_ACQUIRE) == 0 &&
                __atomic_compare_exchange_n(&nplm_guard_hi[i], &free_slot, (uintptr_t)1, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            nplm_guard_lo[i] = lo;
            nplm_guard_damage[i] = 0;
            __atomic_store_n(&nplm_guard_hi[i], hi, __ATOMIC_RELEASE);
            return i;
        }
    }
    return -1;
}

static inline void nplm_guard_remove(int slot, uintptr_t lo) {
    if (slot >= 0 && slot < NPLM_GUARD_SLOTS && nplm_guard_lo[slot] == lo)
        __atomic_store_n(&nplm_guard_hi[slot], 0, __ATOMIC_RELEASE);
}

/* Whether the mapping registered as (slot, lo) lost a page that was read. */
static inline int nplm_guard_damaged(int slot, uintptr_t lo) {
    return slot >= 0 && slot < NPLM_GUARD_SLOTS && nplm_guard_lo[slot] == lo &&
           __atomic_load_n(&nplm_guard_hi[slot], __ATOMIC_ACQUIRE) > 1 && nplm_guard_damage[slot];
}

static inline uint64_t nplm_guard_faults(void) {
    return __atomic_load_n(&nplm_guard_fault_count, __ATOMIC_ACQUIRE);
}

static inline int nplm_guard_slot_of(uintptr_t a) {
    for (int i = 0; i < NPLM_GUARD_SLOTS; i++) {
        uintptr_t hi = __atomic_load_n(&nplm_guard_hi[i], __ATOMIC_ACQUIRE);
        if (hi > 1 && nplm_guard_lo[i] <= a && a < hi)
            return i;
    }
    return -1;
}

static void nplm_guard_handler(int sig, siginfo_t *info, void *context) {
    uintptr_t a = (uintptr_t)info->si_addr;
    int slot = info->si_code > 0 ? nplm_guard_slot_of(a) : -1;     /* a fault, not a kill() */
    if (slot >= 0) {
        void *page = (void *)(a & ~(nplm_guard_page - 1));
        if (mmap(page, nplm_guard_page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
                != MAP_FAILED) {
            nplm_guard_damage[slot] = 1;
            __atomic_add_fetch(&nplm_guard_fault_count, 1, __ATOMIC_RELEASE);
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

/* Put the handler in front of the disposition found now (once); 0 on success. */
static inline int nplm_guard_install(void) {
    if (__atomic_load_n(&nplm_guard_installed, __ATOMIC_ACQUIRE))
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = nplm_guard_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0)
        nplm_guard_page = (uintptr_t)page;
    if (sigaction(SIGBUS, &sa, &nplm_guard_previous) != 0)
        return -1;
    __atomic_store_n(&nplm_guard_installed, 1, __ATOMIC_RELEASE);
    return 0;
}

#endif
