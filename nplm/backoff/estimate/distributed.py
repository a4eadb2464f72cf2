"""The partitioned estimation on a Dask cluster (``estimate(..., client=...)``,
``nplm estimate --scheduler ADDRESS``); install ``nplm[dask]``.

The steps are those of ``partitioned.py``, as tasks on futures instead of passes
over files:

1. each input shard (a file, or a line-aligned byte range of a plain file) is
   counted on a worker by nplm's counting kernel;
2. the client merges the shards' vocabularies (first appearance over the shards
   in order, so word ids and the ARPA's order are the one-machine ones) and plans
   parts by last word from the shards' histograms;
3. each shard's run, renumbered and suffix-sorted, is cut into the parts' segments
   and the engine moves each segment to the task adjusting its part: the shuffle
   that makes continuation counts local;
4. the parts' counts-of-counts are summed on the client (the global reduction
   behind the discounts);
5. per order, each part sums its n-grams' statistics by context and cuts them by
   the part holding the context: the second shuffle, after which each part
   computes its contexts' weights and back-offs and sends the weights back to the
   parts that asked, which interpolate;
6. the client gathers the parts in order and writes the ARPA.

Integer sums are order-free and every float comes from the same kernels, so the
ARPA is the one-machine ARPA, byte for byte.  Workers must see the input paths
(shared storage).
"""
import concurrent.futures
import contextlib
import importlib
import os

import numpy as np

from nplm.backoff import _kn
from nplm.backoff.estimate import count as counting
from nplm.backoff.estimate.counts import ShardCounts, VocabularyOf, merged_vocabulary, renumbered
from nplm.backoff.estimate.discount import discounts as order_discounts
from nplm.backoff.estimate.interpolate import unigrams
from nplm.backoff.estimate.partitioned import (
    ROUTED,
    adjust_segments,
    context_weights,
    lower_index,
    part_probs,
    plan_parts,
    route_contexts,
    run_histogram,
    run_segment,
    word_parts,
)
from nplm.backoff.estimate.report import Report
from nplm.backoff.estimate.write import kept_rows, renumbering
from nplm.io.files import compression_of

SHARD_BYTES = 64 << 20      # a plain input file is cut into shards of about this size


# ---------------------------------------------------------------- tasks (on workers)

class Bounded:
    """A reader of the next ``size`` bytes of ``f``."""

    def __init__(self, f, size):
        self.f, self.left = f, size

    def read(self, n):
        data = self.f.read(min(n, self.left))
        self.left -= len(data)
        return data


def count_shard(path, start, end, order, skip_symbols):
    """Count one shard: a whole file (start None) or the lines in bytes [start, end)."""
    counts = counting.Counts(_kn.Counter(order, skip_symbols), path)
    if start is None:
        counting.count_source(path, counts, Report(False, 1), 1 << 62, None)
    else:
        with open(path, "rb") as f:
            f.seek(start)
            for chunk, line, open_end in counting.chunks(Bounded(f, end - start), 0, Report(False, 1)):
                counting.feed(counts.counter, chunk, path, line, open_end=open_end)
    keys, cnt = counts.counter.suffix_sorted()
    return ShardCounts.from_counter(counts.counter, keys, cnt, path)


def same(value):
    return value


def shard_vocab(shard):
    return shard.vocab, shard.stats


def shard_run(shard, ids, vocab_size):
    """The shard's run in merged ids, and how many of its n-grams end in each word."""
    keys, counts = renumbered(shard, ids)
    return keys, counts, run_histogram(keys, vocab_size)


def run_hist(run):
    return run[2]


def segment(run, lo, hi):
    keys, counts = run_segment(run[0], run[1], lo, hi)
    return np.ascontiguousarray(keys), np.ascontiguousarray(counts)


def adjust_task(segments, config, prune_word, last):
    return adjust_segments([s[0] for s in segments], [s[1] for s in segments], config, prune_word, last)


def adjust_summary(part):
    _, stats, adj1, last_word, last_raw = part
    return stats, adj1, last_word, last_raw


def contexts_task(part, k, prev, word_part, parts):
    """The part's order-k n-grams routed to the parts holding their contexts; ``prev``
    is the part's ``probs_task`` result of order k-1 (unused for k = 2)."""
    arrays = part[0][k]
    return route_contexts(arrays["words"], arrays["adj"], arrays["mark"], arrays["parent"],
                          prev[2] if k > 2 else None, word_part, parts)


def piece_task(routed, q):
    records, starts = routed
    return {name: records[name][starts[q]:starts[q + 1]] for name in ROUTED}


def weights_task(pieces, lower, k, disc, lo, hi, pruning):
    """(back-offs of the part's (k-1)-grams, the weights of each asking part's piece)."""
    if k == 2:
        index, contexts = (None, None), hi - lo
    else:
        arrays = lower[0][k - 1]
        nodes = hi - lo if k == 3 else len(lower[0][k - 2]["adj"])
        index, contexts = lower_index(arrays["words"], arrays["parent"], nodes, lo, k), len(arrays["adj"])
    return context_weights(pieces, *index, contexts, lo, disc, pruning)


def probs_task(part, k, word_part, weights, prev, disc, pruning):
    arrays = part[0][k]
    returned = [wq[1][i] for wq, i in weights]
    prev = prev if k == 2 else prev[0]
    return part_probs(arrays["words"], arrays["adj"], arrays["mark"], arrays["parent"], prev, word_part,
                      returned, disc, pruning)


def rows_task(part, k, probs, backoff, new_id, highest):
    arrays = part[0][k]
    bo = np.zeros(len(arrays["adj"]), dtype=np.float32) if highest else backoff[0]
    return kept_rows(arrays["words"], probs[1], bo, arrays["mark"], new_id)


# ---------------------------------------------------------------- the client's side

def shard_ranges(sources, shard_bytes):
    """(path, start, end) per shard: plain files cut at line starts, compressed ones whole."""
    out = []
    for path in sources:
        if not isinstance(path, str) or path == "-":
            raise ValueError("the Dask estimation reads files that the workers can open, not "
                             "stdin or file objects")
        with open(path, "rb") as f:
            if compression_of(f.read(6)) is not None:
                out.append((path, None, None))
                continue
            size = os.fstat(f.fileno()).st_size
            starts = [0]
            for i in range(1, max(1, size // shard_bytes)):
                f.seek(i * size // max(1, size // shard_bytes))
                f.readline()
                if starts[-1] < f.tell() < size:
                    starts.append(f.tell())
            out.extend((path, a, b) for a, b in zip(starts, starts[1:] + [size]))
    return out


class DaskEstimate:
    """The client's side of one estimation."""

    def __init__(self, client, config, report, parts_per_worker=2):
        self.client, self.config, self.report = client, config, report
        self.parts = max(1, parts_per_worker * len(client.scheduler_info().get("workers", {}) or [1]))

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)

    def constant(self, value):
        """A future of ``value`` that the scheduler can recompute: the value rides in
        its task, where scattered data lost with its workers could not be made again
        and every task after it would be cancelled."""
        return self.submit(same, value)

    def count(self, text):
        ranges = shard_ranges(counting.source_names(text), SHARD_BYTES)
        self.shards = [self.submit(count_shard, p, a, b, self.config.order, self.config.skip_symbols)
                       for p, a, b in ranges]
        heads = self.client.gather([self.submit(shard_vocab, s) for s in self.shards])
        merged = ShardCounts(None, None, None, self.config.order, self.config.skip_symbols,
                             {k: sum(h[1][k] for h in heads) for k in heads[0][1]})
        merged.vocab, maps = merged_vocabulary([ShardCounts(h[0], None, None, 0, 0, {}) for h in heads])
        self.vocabulary = VocabularyOf(merged)
        v = len(merged.vocab)
        self.runs = [self.submit(shard_run, s, ids, v) for s, ids in zip(self.shards, maps)]
        hist = sum(self.client.gather([self.submit(run_hist, r) for r in self.runs]))
        self.plan = plan_parts(hist, v, -(-int(hist.sum()) // self.parts), self.parts)
        self.word_part = self.constant(word_parts(self.plan.bounds))
        self.report.say(f"{len(ranges)} shards, {self.plan.parts} parts on the cluster")
        return self.vocabulary

    def adjust(self, prune_word):
        b, parts = self.plan.bounds, self.plan.parts
        prune = self.constant(prune_word)
        segs = [[self.submit(segment, r, int(b[p]), int(b[p + 1])) for p in range(parts)] for r in self.runs]
        self.adjusted = [self.submit(adjust_task, [s[p] for s in segs], self.config, prune, p == parts - 1)
                         for p in range(parts)]
        summary = self.client.gather([self.submit(adjust_summary, a) for a in self.adjusted])
        del self.runs, self.shards
        v = len(prune_word)
        stats = sum(s[0] for s in summary)
        self.adj1, self.mark1 = sum(s[1] for s in summary), np.zeros(v, dtype=np.uint8)
        _kn.unigram_stats(self.adj1, self.mark1, prune_word, self.config.limit_vocab_file is not None,
                          self.config.order, summary[-1][2], summary[-1][3], stats)
        return stats

    def order(self, k, disc, prev):
        """Back-offs of order k-1 (for unigrams, an array; else futures per part)
        and futures of order k's (prob, logprob) per part."""
        parts, pruning, b = self.plan.parts, self.config.pruning, self.plan.bounds
        routed = [self.submit(contexts_task, a, k, None if k == 2 else prev[p], self.word_part, parts)
                  for p, a in enumerate(self.adjusted)]
        weights = []
        for q in range(parts):
            pieces = [self.submit(piece_task, r, q) for r in routed]
            weights.append(self.submit(weights_task, pieces, None if k == 2 else self.adjusted[q], k, disc,
                                       int(b[q]), int(b[q + 1]), pruning))
        probs = [self.submit(probs_task, self.adjusted[p], k, self.word_part, [(w, p) for w in weights],
                             prev if k == 2 else prev[p], disc, pruning) for p in range(parts)]
        return weights, probs

    def run(self, discounts, kept, vocab):
        prob1, logprob1 = unigrams(self.adj1, self.mark1, discounts[0], self.config, kept[0])
        prev, backoffs, logprobs = self.constant(prob1), {}, {}
        for k in range(2, self.config.order + 1):
            backoffs[k - 1], probs = self.order(k, discounts[k - 1], prev)
            logprobs[k], prev = probs, probs
        backoff1 = np.concatenate([w[0] for w in self.client.gather(backoffs.pop(1))]) if 1 in backoffs \
            else np.zeros(len(vocab), dtype=np.float32)
        new_id, kept_vocab = renumbering(self.mark1, vocab)
        new_id_f = self.constant(new_id) if new_id is not None else None

        def blocks(k):
            with cluster_failures():
                yield from part_blocks(k)

        def part_blocks(k):
            if k == 0:
                keep1 = self.mark1 == 0
                yield np.arange(int(keep1.sum()), dtype=np.int32)[:, None], logprob1[keep1], backoff1[keep1]
                return
            n = k + 1
            for p in range(self.plan.parts):
                bo = backoffs[n][p] if n < self.config.order else None
                yield self.client.submit(rows_task, self.adjusted[p], n, logprobs[n][p], bo, new_id_f,
                                         n == self.config.order, pure=False).result()
        return blocks, kept_vocab


class ClusterError(OSError):
    """Work the Dask cluster lost and could not do again (a worker killed more
    often than the scheduler's allowed failures, or the scheduler gone)."""


@contextlib.contextmanager
def cluster_failures():
    """Dask's errors for lost work as one ClusterError naming the task or worker.
    A worker lost once is not an error: its tasks are recomputed from their inputs."""
    lost = (concurrent.futures.CancelledError, importlib.import_module("distributed").KilledWorker,
            importlib.import_module("distributed.comm.core").CommClosedError)
    try:
        yield
    except lost as e:
        raise ClusterError(f"the Dask cluster lost work it could not redo ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else 'no detail'}); the estimation stopped "
                           "and wrote nothing") from None


def estimate_dask(client, text, config, report, prune_words):
    """The estimation on ``client``'s cluster: (blocks for the ARPA writer, kept
    vocabulary, kept counts, the vocabulary as a counter stand-in)."""
    with cluster_failures():
        return _estimate_dask(client, text, config, report, prune_words)


def _estimate_dask(client, text, config, report, prune_words):
    job = DaskEstimate(client, config, report)
    vocabulary = job.count(text)
    counting_report(vocabulary, report)
    report.stage(2, "Calculating and sorting adjusted counts")
    stats = job.adjust(prune_words(vocabulary))
    discounts, kept = order_discounts(stats, config, report)
    report.stage(3, "Calculating and sorting initial probabilities")
    report.stage(4, "Calculating and writing order-interpolated probabilities")
    blocks, kept_vocab = job.run(discounts, kept, vocabulary.words())
    return blocks, kept_vocab, kept, vocabulary


def counting_report(vocabulary, report):
    report.say(f"Unigram tokens {vocabulary.tokens} types {vocabulary.vocab_size}")
