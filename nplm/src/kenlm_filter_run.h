#ifndef NPLM_KENLM_FILTER_RUN_H
#define NPLM_KENLM_FILTER_RUN_H
/* KenLM's filter program, the pass itself (the parts it is made of are in
   kenlm_filter.h and kenlm_filter_phrase.h): the ARPA file's sections or the raw
   lines read in order by the calling thread, with a second thread filtering chunks
   of them alongside. */
#include <pthread.h>
#include "kenlm_filter.h"

/* ---- the second thread.  With one output (copy, single, union, phrase union), the
   n-gram lines are cut into chunks of whole lines.  A second thread filters chunks
   from the last one backwards, each into memory, as if every line with a tab were an
   n-gram line, and notes each line without a tab (a section's header, a blank line,
   \end\) with what it had kept before it.  The first thread reads from the start as KenLM does;
   on entering a chunk it claims it and reads it itself, unless the second thread
   has it, and then (waiting for it to finish) takes the chunk's lines in whole runs,
   from one noted line to the next, while each run fits the section's count; where
   one does not (a file laid out differently: a run longer than the section, a blank
   line with a tab) it reads the rest of that chunk itself, which is always right.
   The threads meet where they meet: on a busy machine the first does more. */
enum { NPLM_FC_FREE, NPLM_FC_FIRST, NPLM_FC_BUSY, NPLM_FC_DONE };

typedef struct {
    size_t pos, end;           /* the noted line: its start and the position after it */
    uint64_t plain, kept;      /* lines with a tab in the chunk before it, and those kept */
    size_t out;                /* runs of the chunk's output before it */
} nplm_fnote;

typedef struct {
    size_t start, end;         /* whole lines */
    int state, failed, dropped;/* dropped: the first thread reads the rest itself */
    nplm_frange *runs;
    nplm_fnote *notes;
    size_t count, cap;
} nplm_fchunk;

typedef struct nplm_fhalf {
    nplm_filter f;             /* the second thread's own state */
    nplm_fout out;
    nplm_fchunk *chunks;
    size_t n;
    size_t cur, next;          /* the first thread's chunk, and its next note there */
    pthread_mutex_t lock;
    pthread_cond_t done;
    pthread_t thread;
    int running;
} nplm_fhalf;

static int nplm_fout_runs(nplm_fout *o, const nplm_frange *r, size_t count) {
    for (size_t i = 0; i < count; ++i) if (nplm_fout_put(o, r[i].s, r[i].n)) return -1;
    return 0;
}

static int nplm_fnote_add(nplm_fhalf *h, nplm_fchunk *c, size_t pos, size_t end, uint64_t plain) {
    if (c->count == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        nplm_fnote *a = realloc(c->notes, cap * sizeof(*a));
        if (!a) return -1;
        c->notes = a;
        c->cap = cap;
    }
    nplm_fnote *note = &c->notes[c->count++];
    note->pos = pos; note->end = end; note->plain = plain; note->kept = h->out.lines; note->out = h->out.len;
    return 0;
}

static int nplm_fchunk_lines(nplm_fhalf *h, nplm_fchunk *c, uint64_t *count) {
    nplm_filter *f = &h->f;
    const char *s; size_t n; int nl;
    uint64_t plain = 0;
    f->pos = c->start;
    while (f->pos < c->end) {
        size_t at = f->pos;
        const char *t, *e;
        if (!f->arpa) {
            if (!nplm_fread_line(f, &s, &n, &nl)) break;
            ++plain;
            t = memchr(s, '\t', n);
            if (nplm_fline(f, s, n, nl, s, t ? t : s + n)) return -1;
            continue;
        }
        if (!nplm_fread_ngram(f, &s, &n, &nl, &t, &e)) break;
        if (!t) {
            if (nplm_fnote_add(h, c, at, f->pos, plain)) return -1;
            continue;
        }
        ++plain;
        if (nplm_fline(f, s, n, nl, t, e)) return -1;
    }
    *count = plain;
    return 0;
}

/* Filter one chunk into runs of the input; -1 out of memory. */
static int nplm_fchunk_run(nplm_fhalf *h, nplm_fchunk *c) {
    uint64_t plain = 0;
    h->out.runs = NULL;
    h->out.cap = 0;
    h->out.len = 0;
    h->out.lines = 0;
    int r = nplm_fchunk_lines(h, c, &plain);
    c->runs = h->out.runs;
    return r ? r : nplm_fnote_add(h, c, c->end, c->end, plain);
}

static void *nplm_fhalf_run(void *arg) {
    nplm_fhalf *h = arg;
    for (size_t i = h->n; i-- > 0;) {
        nplm_fchunk *c = &h->chunks[i];
        pthread_mutex_lock(&h->lock);
        int mine = c->state == NPLM_FC_FREE;
        if (mine) c->state = NPLM_FC_BUSY;
        pthread_mutex_unlock(&h->lock);
        if (!mine) break;
        int failed = nplm_fchunk_run(h, c) != 0;
        pthread_mutex_lock(&h->lock);
        c->failed = failed;
        c->state = NPLM_FC_DONE;
        pthread_cond_broadcast(&h->done);
        pthread_mutex_unlock(&h->lock);
    }
    return NULL;
}

static void nplm_fhalf_free(nplm_filter *f) {
    nplm_fhalf *h = f->half;
    if (!h) return;
    if (h->running) {
        /* claim every chunk left, so that the second thread stops at its next one */
        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < h->n; ++i) if (h->chunks[i].state == NPLM_FC_FREE) h->chunks[i].state = NPLM_FC_FIRST;
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->thread, NULL);
    }
    for (size_t i = 0; i < h->n; ++i) { free(h->chunks[i].runs); free(h->chunks[i].notes); }
    free(h->chunks);
    free((void *)h->f.sets); free(h->f.set_n);
    nplm_pscratch_free(&h->f.ps);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->done);
    free(h);
    f->half = NULL;
}

/* Cut data[from:] into chunks of about f->chunk bytes and start the second thread;
   with f->wait_second the first waits for it to finish them all (tests). */
static void nplm_fhalf_start(nplm_filter *f, size_t from) {
    f->split = SIZE_MAX;
    if (f->threads < 2 || f->nout != 1 || f->mode == NPLM_F_MULTIPLE || f->mode == NPLM_F_PHRASE_MULTIPLE ||
        f->size - from < f->split_min ||
        f->size <= from)
        return;
    size_t step = f->chunk ? f->chunk : (f->size - from) / 64 + 1;
    if (step < 4096 && !f->chunk) step = 4096;
    nplm_fhalf *h = calloc(1, sizeof(*h));
    if (!h) return;
    size_t cap = (f->size - from) / step + 2;
    h->chunks = calloc(cap, sizeof(nplm_fchunk));
    if (!h->chunks) { free(h); return; }
    for (size_t at = from; at < f->size && h->n < cap;) {
        size_t end = at + step < f->size ? at + step : f->size;
        if (end < f->size) {
            const char *nl = memchr(f->data + end - 1, '\n', f->size - (end - 1));
            end = nl ? (size_t)(nl + 1 - f->data) : f->size;
        }
        h->chunks[h->n].start = at;
        h->chunks[h->n].end = end;
        ++h->n;
        at = end;
    }
    h->chunks[h->n - 1].end = f->size;
    h->f = *f;
    h->f.sets = NULL; h->f.set_n = NULL; h->f.set_cap = 0; h->f.half = NULL;
    memset(&h->f.ps, 0, sizeof(h->f.ps));
    h->out.ranges = 1;
    h->out.fd = -1;
    h->f.outs = &h->out;
    h->f.nout = 1;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->done, NULL);
    f->half = h;
    if (pthread_create(&h->thread, NULL, nplm_fhalf_run, h)) { nplm_fhalf_free(f); return; }
    h->running = 1;
    if (f->wait_second) { pthread_join(h->thread, NULL); h->running = 0; }
    h->cur = 0;
    f->split = h->chunks[0].start;
}

/* Enter the chunk that holds f->pos: claim it, or wait for the second thread's. */
static void nplm_fchunk_enter(nplm_filter *f) {
    nplm_fhalf *h = f->half;
    pthread_mutex_lock(&h->lock);
    /* chunks passed over (read as headers and blank lines) are the first thread's too */
    for (; h->cur < h->n && h->chunks[h->cur].end <= f->pos; ++h->cur)
        if (h->chunks[h->cur].state == NPLM_FC_FREE) h->chunks[h->cur].state = NPLM_FC_FIRST;
    if (h->cur == h->n) { pthread_mutex_unlock(&h->lock); f->split = SIZE_MAX; return; }
    nplm_fchunk *c = &h->chunks[h->cur];
    if (c->state == NPLM_FC_FREE) c->state = NPLM_FC_FIRST;
    while (c->state == NPLM_FC_BUSY) pthread_cond_wait(&h->done, &h->lock);
    pthread_mutex_unlock(&h->lock);
    if (c->state == NPLM_FC_DONE && c->failed) c->dropped = 1;
    h->next = 0;
}

/* At f->pos >= f->split with *left lines of the section to read: take the second
   thread's next run of lines when it fits.  1: taken, 0: read the next line
   yourself, -1: a write failed. */
static int nplm_fhalf_take(nplm_filter *f, uint64_t *left) {
    nplm_fhalf *h = f->half;
    if (h->cur >= h->n || f->pos >= h->chunks[h->cur].end || f->pos < h->chunks[h->cur].start ||
        f->split == h->chunks[h->cur].start) {
        nplm_fchunk_enter(f);
        if (f->split == SIZE_MAX) return 0;
    }
    nplm_fchunk *c = &h->chunks[h->cur];
    if (c->state != NPLM_FC_DONE || c->dropped) { f->split = c->end; return 0; }
    f->split = 0;       /* come back at the next line */
    while (h->next < c->count && c->notes[h->next].pos < f->pos) ++h->next;
    const nplm_fnote *to = &c->notes[h->next];     /* (the last note is at the chunk's end) */
    if (to->pos == f->pos) return 0;                /* the next line is a noted one */
    nplm_fnote zero = {c->start, c->start, 0, 0, 0};
    const nplm_fnote *from = h->next ? &c->notes[h->next - 1] : &zero;
    uint64_t lines = to->plain - from->plain;
    if (from->end != f->pos || lines > *left) { c->dropped = 1; f->split = c->end; return 0; }
    nplm_fout *out = &f->outs[0];
    if (nplm_fout_runs(out, c->runs + from->out, to->out - from->out)) { f->err_out = 0; return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0); }
    out->lines += to->kept - from->kept;
    *left -= lines;
    f->line_no += lines;
    f->pos = to->pos;
    if (f->pos == c->end) f->split = c->end;
    return 1;
}

static int nplm_farpa(nplm_filter *f) {
    if (nplm_fheader(f)) return -1;
    nplm_fhalf_start(f, f->pos);
    for (uint32_t o = 0; o < f->nout; ++o) {
        nplm_fout *out = &f->outs[o];
        for (size_t i = 0; i < f->reserve; ++i) if (nplm_fout_put(out, "\n", 1)) { f->err_out = o; return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0); }
    }
    const char *s; size_t n; int nl;
    for (int order = 1; order <= f->orders; ++order) {
        f->order = order;
        char expect[32];
        int en = sprintf(expect, "\\%d-grams:", order);
        do {
            if (!nplm_fread_line(f, &s, &n, &nl)) return nplm_ffail(f, NPLM_FE_EOF, NULL, 0);
        } while (nplm_white(s, n));
        if (n != (size_t)en || memcmp(s, expect, n)) return nplm_ffail(f, NPLM_FE_HEADER, s, n);
        expect[en] = '\n';
        if (nplm_fput_all(f, expect, (size_t)en + 1)) return -1;
        for (uint32_t o = 0; o < f->nout; ++o) f->outs[o].lines = 0;
        for (uint64_t i = f->counts[order - 1]; i; --i) {
            if (f->pos >= f->split) {
                int r;
                while ((r = nplm_fhalf_take(f, &i)) > 0 && i) {}
                if (r < 0) return -1;
                if (!i) break;
            }
            const char *t, *e;
            if (!nplm_fread_ngram(f, &s, &n, &nl, &t, &e)) return nplm_ffail(f, NPLM_FE_EOF, NULL, 0);
            if (!t) return nplm_ffail(f, NPLM_FE_NO_TAB, s, n);
            if (nplm_fline(f, s, n, nl, t, e)) return -1;
        }
        if (nplm_fput_all(f, "\n", 1)) return -1;
        for (uint32_t o = 0; o < f->nout; ++o) f->outs[o].counts[order - 1] = f->outs[o].lines;
    }
    do {
        if (!nplm_fread_line(f, &s, &n, &nl)) return nplm_ffail(f, NPLM_FE_EOF, NULL, 0);
    } while (nplm_white(s, n));
    if (!(n == 5 && memcmp(s, "\\end\\", 5) == 0)) return nplm_ffail(f, NPLM_FE_END, s, n);
    while (nplm_fread_line(f, &s, &n, &nl))
        if (!nplm_white(s, n)) return nplm_ffail(f, NPLM_FE_TRAILING, s, n);
    return nplm_fput_all(f, "\\end\\\n", 6);
}

static int nplm_fraw(nplm_filter *f) {
    const char *s; size_t n; int nl;
    nplm_fhalf_start(f, 0);
    for (;;) {
        while (f->pos >= f->split) {
            /* a chunk the second thread filtered is taken whole */
            nplm_fchunk_enter(f);
            if (f->split == SIZE_MAX) break;
            nplm_fchunk *c = &f->half->chunks[f->half->cur];
            f->split = c->end;
            if (c->state != NPLM_FC_DONE || c->dropped) break;
            if (nplm_fout_runs(&f->outs[0], c->runs, c->notes[c->count - 1].out)) { f->err_out = 0; return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0); }
            f->line_no += c->notes[c->count - 1].plain;
            f->pos = c->end;
        }
        if (!nplm_fread_line(f, &s, &n, &nl)) break;
        const char *t = memchr(s, '\t', n);
        if (nplm_fline(f, s, n, nl, s, t ? t : s + n)) return -1;
    }
    return 0;
}

/* Run the pass and flush the outputs (the ARPA header not written: see
   nplm_ffinish).  Returns 0, or -1 with f->err set. */
static int nplm_frun(nplm_filter *f) {
    f->pos = 0;
    f->line_no = 0;
    f->err = NPLM_FE_OK;
    f->split = SIZE_MAX;
    f->half = NULL;
    if (f->nout == 1 && !f->outs[0].cap) nplm_fout_grow(&f->outs[0], (size_t)1 << 20);
    int r = f->arpa ? nplm_farpa(f) : nplm_fraw(f);
    nplm_fhalf_free(f);
    nplm_pscratch_free(&f->ps);
    if (r) return r;
    for (uint32_t o = 0; o < f->nout; ++o) {
        nplm_fout *out = &f->outs[o];
        if (nplm_fout_settle(out)) { f->err_out = o; return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0); }
        if (out->memory && f->arpa) {
            char head[256 * 48];
            size_t h = nplm_counts_header(head, out->counts, f->orders);
            memcpy(out->buf, head, h);
        }
        if (nplm_fout_flush(out)) { f->err_out = o; return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0); }
        if (f->arpa && !out->memory) {
            char head[256 * 48];
            size_t h = nplm_counts_header(head, out->counts, f->orders), done = 0;
            while (done < h) {
                ssize_t w = pwrite(out->fd, head + done, h - done, (off_t)done);
                if (w < 0) {
                    if (errno == EINTR) continue;
                    out->err = errno;
                    f->err_out = o;
                    return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0);
                }
                done += (size_t)w;
            }
        }
    }
    return 0;
}
#endif
