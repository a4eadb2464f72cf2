"""Back-off models by their definitions, in pure Python on tiny vocabularies: what the
pruning and mixing tests compare nplm with."""
import itertools
import math
import random

import kenlm

from nplm.backoff.arpa import read_arpa
from nplm.cli.main import main

WORDS = ["a", "b", "c", "d", "e", "f"]


def write_corpus(path, seed, lines=80, words=WORDS):
    """Sentences of 1-6 words with some structure (a word tends to follow its
    neighbour), every word at least once."""
    rng = random.Random(seed)
    out = [" ".join(words)]
    for _ in range(lines):
        w = [rng.choice(words)]
        for _ in range(rng.randint(0, 5)):
            i = words.index(w[-1])
            w.append(words[(i + 1) % len(words)] if rng.random() < 0.6 else rng.choice(words))
        out.append(" ".join(w))
    path.write_text("\n".join(out) + "\n")
    return path


def estimate(text, out, order):
    assert main(["estimate", "-o", str(order), "--text", str(text), "--arpa", str(out), "--discount_fallback", "-q"]) == 0
    return out


def listed(path):
    """{n-gram tuple: probability} of an ARPA file's n-grams."""
    t = read_arpa(str(path))
    out = {}
    for n in range(1, t.order + 1):
        for row, lp in zip(t.ids[n - 1].tolist(), t.logprob[n - 1].tolist()):
            out[tuple(t.vocab[i] for i in row)] = 10.0 ** lp
    return out


class Backoff:
    """p(w | h) of listed probabilities ``p`` with every back-off weight computed so
    that each context sums to one: bow(h) = (1 - sum of p(v | h) over the words h
    lists) / (1 - sum of p(v | h') over the same words), h' = h less its first word.
    The unigrams are scaled to sum to one over every word but <s> (a file's rounding
    leaves them off by ~1e-8, which 1 - sum over the listed words magnifies)."""

    def __init__(self, p, order):
        self.p = dict(p)
        self.order = order
        self.vocab = sorted({g[0] for g in p if len(g) == 1})
        self.predictable = [w for w in self.vocab if w != "<s>"]
        total = sum(self.p[(w,)] for w in self.predictable)
        for w in self.predictable:
            self.p[(w,)] /= total
        self.ext = {}
        for g in self.p:
            if len(g) > 1:
                self.ext.setdefault(g[:-1], []).append(g[-1])
        self._bow = {}

    def bow(self, h):
        if h not in self._bow:
            ws = self.ext.get(h, [])
            num = 1.0 - sum(self.p[h + (w,)] for w in ws)
            den = 1.0 - sum(self.prob(w, h[1:]) for w in ws)
            self._bow[h] = num / den if ws else 1.0
        return self._bow[h]

    def prob(self, w, h):
        h = tuple(h)[-(self.order - 1):] if self.order > 1 else ()
        if h + (w,) in self.p:
            return self.p[h + (w,)]
        if not h:
            return self.p[("<unk>",)]
        return self.bow(h) * self.prob(w, h[1:]) if h in self.ext else self.prob(w, h[1:])

    def history_prob(self, h):
        """P(h) by the chain rule, P(<s> ...) starting with p(</s>) (SRILM's)."""
        P = self.prob("</s>", ()) if h[0] == "<s>" else self.prob(h[0], ())
        for i in range(1, len(h)):
            P *= self.prob(h[i], h[:i])
        return P

    def without(self, gram):
        p = dict(self.p)
        del p[gram]
        return Backoff(p, self.order)


def relative_entropy(before, after, k):
    """sum over every history g of k words of P(g) sum_v p(v|g) ln(p(v|g) / p'(v|g)),
    the whole vocabulary, P and p of ``before``."""
    D = 0.0
    for g in itertools.product(before.vocab, repeat=k):
        P = before.history_prob(g)
        if P == 0.0:
            continue
        for v in before.predictable:
            p, q = before.prob(v, g), after.prob(v, g)
            D += P * p * math.log(p / q)
    return D


def kenlm_log10(model, h, w):
    """log10 p(w | h) by the real kenlm, the state built word by word from h."""
    s, t = kenlm.State(), kenlm.State()
    if h and h[0] == "<s>":
        model.BeginSentenceWrite(s)
        h = h[1:]
    else:
        model.NullContextWrite(s)
    for word in h:
        model.BaseScore(s, word, t)
        s, t = t, s
    return model.BaseScore(s, w, t)


def context_sums(path, contexts):
    """{context: sum over every word but <s> of p(w | context)} by the real kenlm."""
    config = kenlm.Config()
    config.load_method = kenlm.LoadMethod.READ
    model = kenlm.Model(str(path), config)
    vocab = sorted({g[0] for g in listed(path) if len(g) == 1} - {"<s>"})
    return {h: sum(10.0 ** kenlm_log10(model, h, w) for w in vocab) for h in contexts}
