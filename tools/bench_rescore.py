"""N-best rescoring benchmark on PTB: 1-best word error rate of a noisy channel alone
and with language-model features, and the speed of ``nplm.rescore`` against a plain
Python loop over the real ``kenlm`` module.

The n-best lists are built reproducibly (seeded) from PTB sentences by a confusion
channel.  For each reference sentence, hypotheses are drawn until ``--nbest``
distinct ones are found (or 50 times as many draws are spent):

* the number of edits k ~ Poisson(1.5) (k = 0 gives the reference itself);
* each edit is a substitution (p 0.6) of the word at a uniform position by another
  word of its Brown class (100 classes of PTB train, ``nplm.neural.clusters``),
  drawn in proportion to its training count; a deletion (0.2) of the word at a
  uniform position; or an insertion (0.2) of a word drawn from the training
  unigram at a uniform position;
* the channel score (the list's first feature, ``Channel0``, log10) is the log
  probability of those edits, log10 Poisson(k) + sum of log10 p(edit), plus
  Gaussian noise of deviation ``--noise`` (2.0): the decoder's own uncertainty,
  without which the channel alone would always pick the reference.

Each line also has the decoder's usual word count feature, ``WordPenalty0`` = minus
the number of words.  Systems rank each list by ``Channel0 + wp * WordPenalty0 +
lambda * LM`` where LM is KN5 (PTB train, lmplz or nplm.estimate), a small neural
model trained here (``--neural-epochs``; 0 leaves it out) or their linear
interpolation (EM-tuned on PTB valid text); (lambda, wp) is the grid point (lambda
0 to 2 by 0.1, wp -6 to 6 by 0.5) with the lowest WER on valid lists built the same
way, and the WER reported is on test lists.

Speed: hypotheses per second of ``nplm.rescore`` (the KN5 as an nplm binary, one
thread and two; with ``--all-formats`` also loaded from its ARPA file and from a
KenLM probing binary when KenLM's build_binary is there) against a Python loop that splits each Moses line,
calls ``kenlm.Model.score`` (the model loaded from the ARPA file) on the hypothesis
and writes the line with the feature; both read and write the same files.  Rounds
alternate, the best wall and process CPU time of each is kept.  ``--json`` saves the
speed table for tools/docs_benchmarks.py.

    python tools/bench_rescore.py [--sentences 300] [--speed-sentences 1000] [--skip-wer]
                                  [--all-formats] [--json benchmarks/rescore.json]
"""
import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as common  # noqa: E402

import nplm  # noqa: E402
from nplm.neural.clusters import brown_clusters, read_corpus  # noqa: E402

P_SUB, P_DEL, P_INS = 0.6, 0.2, 0.2
MEAN_EDITS = 1.5


class Channel:
    """The confusion channel of the module docstring."""

    def __init__(self, words, counts, word_class, noise, seed):
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}
        self.counts = counts.astype(np.float64)
        self.uni = self.counts / self.counts.sum()
        self.cum_uni = np.cumsum(self.uni)
        self.word_class = word_class
        self.members = {}
        for c in np.unique(word_class):
            ids = np.flatnonzero(word_class == c)
            self.members[int(c)] = ids
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def _substitute(self, w):
        i = self.index.get(w)
        ids = self.members[int(self.word_class[i])] if i is not None else np.zeros(0, int)
        ids = ids[ids != i] if i is not None else ids
        if ids.size == 0:
            ids = np.arange(len(self.words))
        p = self.counts[ids] / self.counts[ids].sum()
        j = self.rng.choice(ids.size, p=p)
        return self.words[ids[j]], math.log10(p[j])

    def _insertion(self):
        j = int(np.searchsorted(self.cum_uni, self.rng.random() * self.cum_uni[-1]))
        j = min(j, len(self.words) - 1)
        return self.words[j], math.log10(self.uni[j])

    def draw(self, ref):
        """(hypothesis words, channel log10 score before noise)."""
        k = int(self.rng.poisson(MEAN_EDITS))
        score = k * math.log10(MEAN_EDITS) - MEAN_EDITS / math.log(10) - math.log10(math.factorial(k))
        hyp = list(ref)
        for _ in range(k):
            u = self.rng.random()
            n = len(hyp)
            if u < P_SUB and n:
                i = int(self.rng.integers(n))
                hyp[i], lp = self._substitute(hyp[i])
                score += math.log10(P_SUB / n) + lp
            elif u < P_SUB + P_DEL and n > 1:
                i = int(self.rng.integers(n))
                del hyp[i]
                score += math.log10(P_DEL / n)
            else:
                i = int(self.rng.integers(n + 1))
                w, lp = self._insertion()
                hyp.insert(i, w)
                score += math.log10(P_INS / (n + 1)) + lp
        return hyp, score

    def nbest(self, ref, n):
        seen = {}
        for _ in range(50 * n):
            hyp, score = self.draw(ref)
            key = tuple(hyp)
            if key not in seen:
                seen[key] = score + self.rng.normal(0.0, self.noise)
                if len(seen) == n:
                    break
        return list(seen.items())


def brown_classes(n_classes=100):
    """PTB train's words (UNK spelling), their counts and Brown classes."""
    words, counts, ids = read_corpus(str(common.ptb_train_unk()))
    cache = common.CACHE / f"ptb.brown{n_classes}.npy"
    if cache.exists():
        word_class = np.load(cache)
    else:
        word_class = brown_clusters(ids, len(words), n_classes, iterations=10)
        np.save(cache, word_class)
    keep = np.array([w != "</s>" for w in words])
    return [w for w, k in zip(words, keep) if k], counts[keep], word_class[keep]


def write_list(path, refs, channel, n):
    """A Moses n-best list of ``refs``; returns the hypotheses' words per line."""
    hyps = []
    with open(path, "w", encoding="utf-8") as f:
        for i, ref in enumerate(refs):
            for words, score in channel.nbest(ref.split(), n):
                f.write(f"{i} ||| {' '.join(words)} ||| Channel0= {score:.4f} WordPenalty0= "
                        f"{-len(words)} ||| {score:.4f}\n")
                hyps.append((i, list(words)))
    return hyps


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def read_features(path, names):
    """(sentence ids, {feature name: values}) of a rescored list."""
    ids, feats = [], {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split("|||")
            ids.append(int(fields[0]))
            toks = fields[2].split()
            for k, v in zip(toks[0::2], toks[1::2]):
                feats.setdefault(k.rstrip("="), []).append(float(v))
    return np.array(ids), {n: np.array(v) for n, v in feats.items()}


def one_best_wer(groups, score, errors, ref_words):
    """WER of the first hypothesis of highest ``score`` per sentence (rows
    groups[i]:groups[i + 1])."""
    total = 0
    for a, b in zip(groups[:-1], groups[1:]):
        total += errors[a + int(np.argmax(score[a:b]))]
    return total / ref_words


def build_models(neural_epochs):
    arpa = common.kn_arpa(5)
    cache = common.CACHE
    kn = cache / "ptb.o5.nplm"
    if not kn.exists():
        nplm.build_binary(str(arpa), str(kn))
    models = {"KN5": str(kn)}
    if neural_epochs > 0:
        nn = cache / f"ptb.quick-nn{neural_epochs}-s1.nplm"      # bench_ensemble's seed-1 network
        valid = cache / "ptb.valid.UNK.txt"
        if not valid.exists():
            valid.write_text("\n".join(common.ptb_lines("valid")) + "\n")
        if not nn.exists():
            from nplm.neural.network import NeuralConfig
            from nplm.neural.train import TrainConfig, train
            cfg = NeuralConfig(order=5, embedding_dim=150, hidden=(), context="diagonal", output="class",
                               objective="nce", noise_samples=10, clustering="frequency")
            tc = TrainConfig(epochs=neural_epochs, minibatch=128, learning_rate=0.05, dropout=0.0,
                             input_dropout=0.0, threads=2, seed=1)
            train(str(common.ptb_train_unk()), str(valid), str(nn), cfg, tc, log=lambda s: None,
                  progress=False)
        models["NN"] = str(nn)
        mix = cache / f"ptb.rescore-mix{neural_epochs}.json"
        if not mix.exists():
            m = nplm.interpolate([str(kn), str(nn)])
            m.tune(str(valid))
            m.save(str(mix))
        models["MIX"] = str(mix)
    return models


LM_GRID = np.round(np.arange(0.0, 2.01, 0.1), 2)
WP_GRID = np.round(np.arange(-6.0, 6.01, 0.5), 2)


def tune_weights(data, lm):
    """(lambda, word penalty weight) with the lowest WER on ``data`` (valid lists):
    score = Channel0 + lambda * lm + wp * WordPenalty0."""
    groups, feats, errors, n = data
    best = None
    for lam in (LM_GRID if lm else [0.0]):
        base = feats["Channel0"] + (lam * feats[lm] if lm else 0.0)
        for wp in WP_GRID:
            wer = one_best_wer(groups, base + wp * feats["WordPenalty0"], errors, n)
            if best is None or wer < best[0]:
                best = (wer, lam, wp)
    return best[1], best[2]


def wer_table(args, models, channel, tmp):
    lists = {}
    for split, lines in (("valid", common.ptb_lines("valid")), ("test", common.ptb_lines("test"))):
        refs = [l.strip() for l in lines if l.split()][:args.sentences]
        src, out = tmp / f"{split}.nbest", tmp / f"{split}.rescored"
        hyps = write_list(src, refs, channel, args.nbest)
        t = time.perf_counter()
        nplm.rescore(str(src), list(models.values()), str(out), names=list(models), progress=False)
        took = time.perf_counter() - t
        ids, feats = read_features(out, list(models))
        groups = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1], True])
        errors = np.array([edit_distance(refs[i].split(), w) for i, w in hyps])
        ref_words = sum(len(r.split()) for r in refs)
        lists[split] = (groups, feats, errors, ref_words)
        oracle = sum(errors[a:b].min() for a, b in zip(groups[:-1], groups[1:]))
        print(f"{split}: {len(refs)} sentences, {len(hyps)} hypotheses ({len(hyps) / len(refs):.1f} "
              f"a sentence), oracle WER {100 * oracle / ref_words:.2f}%, mean WER of a hypothesis "
              f"{100 * errors.sum() / (ref_words * len(hyps) / len(refs)):.2f}%, rescored with "
              f"{len(models)} models in {took:.1f} s")
    print("\n| features (weights tuned on the valid lists) | lambda | word penalty | valid WER | test WER |"
          "\n|---|---:|---:|---:|---:|")
    for lm in [None] + list(models):
        lam, wp = tune_weights(lists["valid"], lm)
        w = []
        for split in ("valid", "test"):
            groups, feats, errors, n = lists[split]
            score = feats["Channel0"] + wp * feats["WordPenalty0"] + (lam * feats[lm] if lm else 0.0)
            w.append(100 * one_best_wer(groups, score, errors, n))
        label = "channel + word penalty" + (f" + {lm}" if lm else "")
        print(f"| {label} | {lam if lm else '-'} | {wp} | {w[0]:.2f}% | {w[1]:.2f}% |")


def kenlm_loop(model, src, dst):
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        for line in f:
            fields = line.split(" ||| ")
            fields[2] = f"{fields[2]} LM0= {model.score(fields[1])}"
            g.write(" ||| ".join(fields))


def best_times(fns, repeat):
    """Least wall and process CPU time of each of ``fns`` over ``repeat`` rounds that
    call them in turn (CPU time, which a machine shared with other jobs disturbs
    less, counts every thread's)."""
    wall, cpu = [float("inf")] * len(fns), [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t, c = time.perf_counter(), time.process_time()
            fn()
            wall[i] = min(wall[i], time.perf_counter() - t)
            cpu[i] = min(cpu[i], time.process_time() - c)
    return wall, cpu


def kenlm_binary(arpa):
    """The KN5 as a KenLM probing binary, built by KenLM's build_binary (None
    without it)."""
    build = common.kenlm_program("build_binary")
    out = common.CACHE / "ptb.o5.kenlm-probing"
    if not out.exists():
        if build is None:
            return None
        subprocess.run([str(build), "probing", str(arpa), str(out) + ".tmp"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        Path(str(out) + ".tmp").replace(out)
    return out


def speed(args, channel, models, tmp):
    import kenlm
    refs = [l.strip() for l in common.ptb_lines("test") if l.split()][:args.speed_sentences]
    src, dst = tmp / "speed.nbest", tmp / "speed.out"
    n = len(write_list(src, refs, channel, args.nbest))
    cfg = kenlm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = kenlm.ARPALoadComplain.NONE
    arpa = common.kn_arpa(5)
    km = kenlm.Model(str(arpa), cfg)
    quiet = nplm.Config()
    quiet.show_progress = False
    quiet.arpa_complain = nplm.ARPALoadComplain.NONE
    loaded = [("nplm binary", nplm.Model(models["KN5"]))]
    if args.all_formats:
        loaded.append(("ARPA", nplm.Model(str(arpa), quiet)))
        kbin = kenlm_binary(arpa)
        if kbin is not None:
            loaded.append(("KenLM probing binary", nplm.Model(str(kbin))))
    nm = loaded[0][1]
    hyps = [line.split(" ||| ")[1] for line in open(src, encoding="utf-8")]

    def ours(model, threads):
        with open(dst, "wb") as f:      # a plain file, as the loop's (no atomic rename, no fsync)
            nplm.rescore(str(src), [model], f, progress=False, threads=threads)

    runs = [("kenlm Python loop (split, `score`, write)", lambda: kenlm_loop(km, src, dst))]
    runs += [(f"`nplm.rescore`, KN5 as {label}, 1 thread", lambda m=m: ours(m, 1)) for label, m in loaded]
    runs += [("`nplm.rescore`, KN5 as nplm binary, 2 threads", lambda: ours(nm, 2)),
             ("scoring alone: `kenlm.Model.score` loop", lambda: [km.score(h) for h in hyps]),
             ("scoring alone: nplm `score_sentences`, 1 thread", lambda: nm.score_sentences(hyps, threads=1))]
    wall, cpu = best_times([fn for _, fn in runs], args.rounds)
    rows = []
    print(f"\nspeed on {n} hypotheses of {len(refs)} PTB test sentences, KN5, best of {args.rounds} "
          "alternating rounds (hypotheses/s; ratio to the kenlm loop):")
    print(f"  {'':<52} {'wall':>10} {'ratio':>6} {'CPU':>10} {'ratio':>6}")
    for (label, _), w, c in zip(runs, wall, cpu):
        loop = not label.startswith("`nplm.rescore`")
        rows.append([label, n / w, float("nan") if loop else wall[0] / w,
                     n / c, float("nan") if loop else cpu[0] / c])
        print(f"  {label.replace('`', ''):<52} {n / w:>10,.0f} {'' if loop else f'{wall[0] / w:.2f}x':>6} "
              f"{n / c:>10,.0f} {'' if loop else f'{cpu[0] / c:.2f}x':>6}")
    return {"columns": ["", "wall, hypotheses/s", "wall, ratio to the kenlm loop", "CPU, hypotheses/s",
                        "CPU, ratio to the kenlm loop"],
            "rows": rows,
            "notes": (f"{n:,} hypotheses ({args.nbest} a sentence) of {len(refs)} PTB test sentences from the "
                      "confusion channel; KN5 of PTB train (lmplz), the kenlm module loading its ARPA file. CPU "
                      "time counts every thread's, so a second thread cannot raise the CPU figures.")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=300, help="test and valid sentences for the WER (300)")
    p.add_argument("--nbest", type=int, default=100, help="hypotheses a sentence (100)")
    p.add_argument("--noise", type=float, default=2.0, help="channel score noise, log10 deviation (2.0)")
    p.add_argument("--neural-epochs", type=int, default=3, help="epochs of the small network (0: none)")
    p.add_argument("--speed-sentences", type=int, default=1000, help="test sentences for the speed (1000)")
    p.add_argument("--rounds", type=int, default=5, help="alternating speed rounds (5)")
    p.add_argument("--all-formats", action="store_true",
                   help="also rescore with the KN5 loaded from its ARPA file and a KenLM binary")
    p.add_argument("--json", help="also save the speed table here, for tools/docs_benchmarks.py")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip-wer", action="store_true")
    args = p.parse_args()
    words, counts, word_class = brown_classes()
    models = build_models(args.neural_epochs)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.skip_wer:
            wer_table(args, models, Channel(words, counts, word_class, args.noise, args.seed), tmp)
        table = speed(args, Channel(words, counts, word_class, args.noise, args.seed + 1), models, tmp)
    if args.json:
        common.save_results(args.json, "N-best rescoring against a kenlm loop", [table])


if __name__ == "__main__":
    main()
