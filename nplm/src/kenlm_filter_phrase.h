#ifndef NPLM_KENLM_FILTER_PHRASE_H
#define NPLM_KENLM_FILTER_PHRASE_H
/* KenLM filter's phrase constraint (lm/filter/phrase.hh, phrase.cc), included by
   kenlm_filter.h after its vocabulary.  The vocabulary is phrases: within a line a
   space joins words, a tab or \v ends a phrase, any other white space ends the
   sentence (phrase::ReadMultiple).  An n-gram passes for a sentence when that
   sentence's phrases assemble it, clipped at its two ends: every substring of every
   phrase is a key, with the sorted sentences whose phrases hold it, begin with it,
   end with it, or are it; an n-gram's words are the vertices of a graph whose arcs
   are its substrings that are keys, and the sentences that reach its last word are
   found as KenLM finds them, by lower bounds over the arcs' lists (Vertex and Arc
   of phrase.cc).  KenLM keys the substrings by a hash of their words, so two word
   sequences of equal hash share their sentences there; here the key is exact. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { NPLM_P_SUB, NPLM_P_LEFT, NPLM_P_RIGHT, NPLM_P_PHRASE };

enum { NPLM_P_HEAD = 3 };

typedef struct {
    uint64_t hash;
    uint32_t at, len;          /* an occurrence: ids[at:at+len]; len 0: an empty slot */
    uint32_t entry;
    uint32_t head[NPLM_P_HEAD];/* its first ids (0 past its end), compared without leaving the slot */
} nplm_pslot;

/* A list of sentences: postings[at:at+n], its first, and a bit (s mod 32) for each
   sentence s in it, so that two lists whose bits do not meet are seen to be disjoint
   at once; an n-gram's test reads no posting of a list it need not walk. */
typedef struct {
    uint32_t at, n, first;
    uint32_t bits;
} nplm_plist;

typedef struct {
    nplm_fvocab words;         /* the words of the phrases, and their ids */
    uint32_t *ids;             /* the phrases' word ids, one phrase after another */
    uint32_t *ph_at, *ph_len, *ph_sent;
    uint32_t phrases, sentences;
    uint32_t longest;          /* the most words of a phrase */
    nplm_pslot *slots;
    uint64_t mask;
    int shift;
    uint32_t entries, entry_cap;
    nplm_plist *lists;         /* entry e's list k: lists[4e+k] */
    uint32_t *last;            /* while building: the last sentence added to each list */
    uint32_t *postings;
} nplm_fphrases;

static void nplm_fphrases_free(nplm_fphrases *p) {
    nplm_fvocab_free(&p->words);
    free(p->ids); free(p->ph_at); free(p->ph_len); free(p->ph_sent); free(p->slots);
    free(p->lists); free(p->last); free(p->postings);
    memset(p, 0, sizeof(*p));
}

/* The hash of a word sequence, one word id at a time from 0. */
static inline uint64_t nplm_pchain(uint64_t h, uint32_t id) {
    h = (h ^ ((uint64_t)id + 1)) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 31);
}

static inline uint64_t nplm_pslot_of(const nplm_fphrases *p, uint64_t h) {
    return (h * 0xbf58476d1ce4e5b9ULL) >> p->shift;
}

/* Whether the slot holds the words q[0:n] (hash h). */
static inline int nplm_psame(const nplm_fphrases *p, const nplm_pslot *sl, uint64_t h, const uint32_t *q, uint32_t n) {
    if (sl->hash != h || sl->len != n) return 0;
    for (uint32_t i = 0; i < n && i < NPLM_P_HEAD; ++i) if (sl->head[i] != q[i]) return 0;
    for (uint32_t i = NPLM_P_HEAD; i < n; ++i) if (p->ids[sl->at + i] != q[i]) return 0;
    return 1;
}

/* The entry of the words q[0:n] (hash h), or -1. */
static inline int64_t nplm_plookup(const nplm_fphrases *p, uint64_t h, const uint32_t *q, uint32_t n) {
    for (uint64_t i = nplm_pslot_of(p, h);; i = (i + 1) & p->mask) {
        const nplm_pslot *sl = &p->slots[i];
        if (!sl->len) return -1;
        if (nplm_psame(p, sl, h, q, n)) return sl->entry;
    }
}

static int nplm_pgrow(uint32_t **a, size_t n) {
    uint32_t *b = realloc(*a, n * sizeof(**a));
    if (!b) return -1;
    *a = b;
    return 0;
}

/* Twice the slots (or 4096 at first), the entries placed anew; -1 out of memory. */
static int nplm_pslots_grow(nplm_fphrases *p) {
    uint64_t slots = p->slots ? 2 * (p->mask + 1) : 4096;
    nplm_pslot *old = p->slots, *grown = calloc(slots, sizeof(*grown));
    if (!grown) return -1;
    uint64_t was = old ? p->mask + 1 : 0;
    p->slots = grown;
    p->mask = slots - 1;
    p->shift = 64 - __builtin_ctzll(slots);
    for (uint64_t j = 0; j < was; ++j) {
        if (!old[j].len) continue;
        uint64_t i = nplm_pslot_of(p, old[j].hash);
        while (grown[i].len) i = (i + 1) & p->mask;
        grown[i] = old[j];
    }
    free(old);
    return 0;
}

/* The entry of ids[at:at+n] (hash h), made if new; -1 out of memory.  The table
   stays at most half full. */
static int64_t nplm_pintern(nplm_fphrases *p, uint64_t h, uint32_t at, uint32_t n) {
    uint64_t i;
    for (;;) {
        for (i = nplm_pslot_of(p, h); p->slots[i].len; i = (i + 1) & p->mask)
            if (nplm_psame(p, &p->slots[i], h, p->ids + at, n)) return p->slots[i].entry;
        if (2 * ((uint64_t)p->entries + 1) <= p->mask + 1) break;
        if (nplm_pslots_grow(p)) return -1;
    }
    if (p->entries == p->entry_cap) {
        uint32_t cap = p->entry_cap ? 2 * p->entry_cap : 1024;
        nplm_plist *l = realloc(p->lists, 4 * (size_t)cap * sizeof(*l));
        if (!l) return -1;
        p->lists = l;
        if (nplm_pgrow(&p->last, 4 * (size_t)cap)) return -1;
        p->entry_cap = cap;
    }
    uint32_t e = p->entries++;
    memset(p->lists + 4 * (size_t)e, 0, 4 * sizeof(*p->lists));
    for (int k = 0; k < 4; ++k) p->last[4 * e + k] = UINT32_MAX;
    nplm_pslot *sl = &p->slots[i];
    sl->hash = h; sl->at = at; sl->len = n; sl->entry = e;
    for (uint32_t j = 0; j < n && j < NPLM_P_HEAD; ++j) sl->head[j] = p->ids[at + j];
    return e;
}

/* Sentence s into list k of entry e (SubstringS::AppendSentence: once per sentence);
   counted only, or written where ``fill``. */
static inline void nplm_pnote(nplm_fphrases *p, uint32_t e, int k, uint32_t s, int fill) {
    uint32_t i = 4 * e + (uint32_t)k;
    if (p->last[i] == s) return;
    p->last[i] = s;
    nplm_plist *l = &p->lists[i];
    if (fill) p->postings[l->at + l->n] = s;
    if (!l->n) l->first = s;
    ++l->n;
    l->bits |= 1U << (s & 31);
}

/* Every substring of every phrase into the table (Substrings::AddPhrase): counting
   the lists, or filling them.  -1 out of memory. */
static int nplm_pwalk(nplm_fphrases *p, int fill) {
    for (uint32_t q = 0; q < p->phrases; ++q) {
        uint32_t a = p->ph_at[q], len = p->ph_len[q], s = p->ph_sent[q];
        for (uint32_t start = 0; start < len; ++start) {
            uint64_t h = 0;
            int64_t e = -1;
            for (uint32_t end = start; end < len; ++end) {
                h = nplm_pchain(h, p->ids[a + end]);
                if ((e = nplm_pintern(p, h, a + start, end - start + 1)) < 0) return -1;
                nplm_pnote(p, (uint32_t)e, NPLM_P_SUB, s, fill);
                if (start == 0) nplm_pnote(p, (uint32_t)e, NPLM_P_LEFT, s, fill);
            }
            nplm_pnote(p, (uint32_t)e, NPLM_P_RIGHT, s, fill);
            if (start == 0) nplm_pnote(p, (uint32_t)e, NPLM_P_PHRASE, s, fill);
        }
    }
    return 0;
}

/* The phrases of text[0:size], word ids in p->ids (phrase::ReadMultiple; the end of
   the text ends a sentence as a newline does).  -1 out of memory. */
static int nplm_pread(nplm_fphrases *p, const char *text, size_t size) {
    size_t nids = 0, cap = 0, pcap = 0;
    uint32_t start = 0, sentence = 0;
    int content = 0;
    for (size_t i = 0; i <= size;) {
        char c = i < size ? text[i] : '\n';
        if (!nplm_fspace(c)) {
            size_t j = i;
            while (j < size && !nplm_fspace(text[j])) ++j;
            if (nids == cap && nplm_pgrow(&p->ids, cap = cap ? 2 * cap : 1024)) return -1;
            p->ids[nids++] = (uint32_t)nplm_fvocab_lookup(&p->words, text + i, j - i,
                                                          nplm_fkey(text + i, j - i, text + size));
            i = j;
            continue;
        }
        ++i;
        if (c == ' ') continue;
        if (nids > start) {
            if (p->phrases == pcap) {
                pcap = pcap ? 2 * pcap : 1024;
                if (nplm_pgrow(&p->ph_at, pcap) || nplm_pgrow(&p->ph_len, pcap) || nplm_pgrow(&p->ph_sent, pcap))
                    return -1;
            }
            p->ph_at[p->phrases] = start;
            p->ph_len[p->phrases] = (uint32_t)nids - start;
            if ((uint32_t)nids - start > p->longest) p->longest = (uint32_t)nids - start;
            p->ph_sent[p->phrases++] = sentence;
            start = (uint32_t)nids;
            content = 1;
        }
        if (c == '\t' || c == '\v') continue;
        if (content) { ++sentence; content = 0; }
    }
    p->sentences = sentence;
    return 0;
}

/* Build from text[0:size] (owned by the caller).  Returns 0, or -1 out of memory. */
static int nplm_fphrases_build(nplm_fphrases *p, const char *text, size_t size) {
    memset(p, 0, sizeof(*p));
    if (nplm_fvocab_build(&p->words, text, size) || nplm_pread(p, text, size)) goto oom;
    uint64_t subs = 0;
    for (uint32_t q = 0; q < p->phrases; ++q) subs += (uint64_t)p->ph_len[q] * (p->ph_len[q] + 1) / 2;
    /* (entries, no more than substrings, index their lists as 32-bit 4e + k) */
    if (subs > (UINT32_MAX >> 3) || nplm_pslots_grow(p) || nplm_pwalk(p, 0)) goto oom;
    size_t at = 0;
    for (uint32_t i = 0; i < 4 * p->entries; ++i) {
        p->lists[i].at = (uint32_t)at;
        at += p->lists[i].n;
        p->lists[i].n = 0;
        p->last[i] = UINT32_MAX;
    }
    if (!(p->postings = malloc((at ? at : 1) * 4))) goto oom;
    if (nplm_pwalk(p, 1)) goto oom;
    free(p->last);
    p->last = NULL;
    return 0;
oom:
    nplm_fphrases_free(p);
    return -1;
}

/* ---- an n-gram's test: the graph of phrase.cc, its vertices the n-gram's words */
typedef struct {
    const uint32_t *cur, *last;/* the arc's sentences not yet passed */
    uint32_t val;              /* *cur (read once: the vertex compares its arcs by it) */
    int32_t from;              /* the vertex it leaves; -1: it begins before the n-gram */
} nplm_parc;

typedef struct {
    uint32_t current;          /* a lower bound on the vertex's next sentence */
    uint32_t n;                /* arcs still arriving: in[0:n] */
    uint32_t *in;
    uint32_t bits;             /* the bits (nplm_plist's) of every sentence that may reach it */
} nplm_pvertex;

typedef struct {
    uint32_t *ids, *in, *found;
    nplm_parc *arcs;
    nplm_pvertex *verts;
    size_t words, arcs_cap;    /* ids and verts that fit; arcs and in */
} nplm_pscratch;

static void nplm_pscratch_free(nplm_pscratch *w) {
    free(w->ids); free(w->in); free(w->found); free(w->arcs); free(w->verts);
    memset(w, 0, sizeof(*w));
}

/* Room for k words, and for the arcs of their graph: ``stride`` to a word at most
   (no more than the words, nor than the words of the longest phrase), every sentence
   found.  -1 out of memory. */
static int nplm_pscratch_fit(nplm_pscratch *w, size_t k, size_t stride, uint32_t sentences) {
    if (!w->found && !(w->found = malloc(((size_t)sentences + 1) * 4))) return -1;
    if (k > w->words) {
        size_t cap = w->words ? 2 * w->words : 16;
        while (cap < k) cap *= 2;
        nplm_pvertex *v = realloc(w->verts, cap * sizeof(*v));
        if (!v) return -1;
        w->verts = v;
        if (nplm_pgrow(&w->ids, cap)) return -1;
        w->words = cap;
    }
    if (k * stride > w->arcs_cap) {
        size_t cap = w->arcs_cap ? 2 * w->arcs_cap : 256;
        while (cap < k * stride) cap *= 2;
        nplm_parc *a = realloc(w->arcs, cap * sizeof(*a));
        if (!a) return -1;
        w->arcs = a;
        if (nplm_pgrow(&w->in, cap)) return -1;
        w->arcs_cap = cap;
    }
    return 0;
}

/* The first place in [a, e) not below x: galloping from a, the lists being walked
   forwards. */
static inline const uint32_t *nplm_pgallop(const uint32_t *a, const uint32_t *e, uint32_t x) {
    size_t n = (size_t)(e - a), lo = 0, hi = 1;
    while (hi < n && a[hi] < x) { lo = hi; hi *= 2; }
    if (hi > n) hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x) lo = mid + 1; else hi = mid;
    }
    return a + lo;
}

static void nplm_pvertex_bound(nplm_pscratch *w, uint32_t v, uint32_t to);

/* Arc::LowerBound: past the sentences below ``to``; where it holds ``to``, the vertex
   it leaves must reach ``to`` too, else the arc moves on to that vertex's bound. */
static void nplm_parc_bound(nplm_pscratch *w, nplm_parc *a, uint32_t to) {
    a->cur = nplm_pgallop(a->cur, a->last, to);
    if (a->cur == a->last) return;
    a->val = *a->cur;
    if (a->from < 0 || a->val > to) return;
    nplm_pvertex *f = &w->verts[a->from];
    nplm_pvertex_bound(w, (uint32_t)a->from, to);
    if (!f->n) { a->cur = a->last; return; }
    if (f->current > to) {
        a->cur = nplm_pgallop(a->cur + 1, a->last, f->current);
        if (a->cur != a->last) a->val = *a->cur;
    }
}

/* Vertex::LowerBound: the least of the arriving arcs' bounds, each at or below ``to``
   checked in turn (an arc's bound need not be one of its sentences). */
static void nplm_pvertex_bound(nplm_pscratch *w, uint32_t v, uint32_t to) {
    nplm_pvertex *x = &w->verts[v];
    while (x->n) {
        uint32_t top = 0;
        for (uint32_t t = 1; t < x->n; ++t)
            if (w->arcs[x->in[t]].val < w->arcs[x->in[top]].val) top = t;
        nplm_parc *a = &w->arcs[x->in[top]];
        if (a->val > to) { x->current = a->val; return; }
        nplm_parc_bound(w, a, to);
        if (a->cur == a->last) { x->in[top] = x->in[--x->n]; continue; }
        if (a->val == to) { x->current = to; return; }
    }
}

/* An arc of list k of entry e, unless it can carry no sentence: an empty list
   (Vertex::AddIncoming keeps none), or one whose bits miss those of the vertex it
   leaves (the arc would die on its first test). */
static inline void nplm_parc_add(const nplm_fphrases *p, nplm_pscratch *w, uint32_t *arcs, int64_t e, int kind,
                                 int32_t from, uint32_t to) {
    const nplm_plist *l = &p->lists[4 * (uint32_t)e + (uint32_t)kind];
    uint32_t bits = l->bits & (from < 0 ? ~0U : w->verts[from].bits);
    if (!bits) return;
    nplm_parc *a = &w->arcs[*arcs];
    a->cur = p->postings + l->at;
    a->last = a->cur + l->n;
    a->val = l->first;
    a->from = from;
    nplm_pvertex *x = &w->verts[to];
    x->in[x->n++] = (*arcs)++;
    x->bits |= bits;
}

/* BuildGraph over the k word ids in w->ids: arcs from before the n-gram to each word
   (phrases that end there, or hold the whole n-gram), and from each word to a later
   one (whole phrases, or phrases that begin there and reach past the n-gram).
   Returns 1 where a phrase holds the whole n-gram, and then, where ``first``, builds
   no more (the n-gram passes). */
static int nplm_pgraph(const nplm_fphrases *p, nplm_pscratch *w, uint32_t k, uint32_t stride, int first) {
    uint32_t arcs = 0;
    int whole = 0;
    for (uint32_t j = 0; j < k; ++j) {
        nplm_pvertex *x = &w->verts[j];
        x->n = 0; x->current = 0; x->bits = 0; x->in = w->in + (size_t)j * stride;
    }
    uint64_t h = 0;
    for (uint32_t j = 0; j < k; ++j) {
        h = nplm_pchain(h, w->ids[j]);
        int64_t e = nplm_plookup(p, h, w->ids, j + 1);
        if (e < 0) break;
        whole = j == k - 1;
        nplm_parc_add(p, w, &arcs, e, whole ? NPLM_P_SUB : NPLM_P_RIGHT, -1, j);
    }
    if (whole && first) return 1;
    for (uint32_t i = 1; i < k; ++i) {
        if (!w->verts[i - 1].n) continue;      /* nothing reaches word i - 1: its arcs would die */
        h = 0;
        for (uint32_t j = i; j < k; ++j) {
            h = nplm_pchain(h, w->ids[j]);
            int64_t e = nplm_plookup(p, h, w->ids + i, j - i + 1);
            if (e < 0) break;
            nplm_parc_add(p, w, &arcs, e, j == k - 1 ? NPLM_P_LEFT : NPLM_P_PHRASE, (int32_t)i - 1, j);
        }
    }
    return whole;
}

/* The sentences whose phrases assemble the n-gram [s, e) (words split at spaces; a
   leading tag is dropped and the words end at </s>, as MakeHashes takes them), in
   w->found, in order, and their number (where ``first``, only whether there is one:
   1 or 0, w->found untouched); -1 where the
   n-gram has no words to test (it passes for every sentence); -2 out of memory. */
static int64_t nplm_fphrase_test(const nplm_fphrases *p, nplm_pscratch *w, const char *s, const char *e,
                                 const char *limit, int first) {
    const char *word;
    uint64_t key;
    size_t n;
    uint32_t k = 0;
    int lead = 1;
    while ((n = nplm_fword(&s, e, limit, &word, &key))) {
        if (lead && word[0] == '<' && word[n - 1] == '>') { lead = 0; continue; }
        lead = 0;
        if (n == 4 && !memcmp(word, "</s>", 4)) break;
        if (nplm_pscratch_fit(w, k + 1, 0, p->sentences)) return -2;
        int64_t id = nplm_fvocab_lookup(&p->words, word, n, key);
        w->ids[k++] = id < 0 ? UINT32_MAX : (uint32_t)id;
    }
    if (!k) return -1;
    /* arcs into a word: from before the n-gram, and from each word a phrase away */
    uint32_t stride = k < p->longest ? k : p->longest;
    if (nplm_pscratch_fit(w, k, stride, p->sentences)) return -2;
    if (nplm_pgraph(p, w, k, stride, first) && first) return 1;
    nplm_pvertex *last = &w->verts[k - 1];
    uint32_t lower = 0, found = 0;
    while (last->n) {
        nplm_pvertex_bound(w, k - 1, lower);
        if (!last->n) break;
        if (last->current != lower) { lower = last->current; continue; }
        w->found[found++] = lower++;
        if (first) break;
    }
    return found;
}
#endif
