"""KenLM filter's ``phrase`` constraint (lm/filter/phrase.cc), for the union and
multiple modes of nplm/cli/kenlm/filter.py: the vocabulary is tab-separated phrases,
a line of them per sentence, and an n-gram passes for a sentence when it can be
assembled from that sentence's phrases, clipped at its two ends.  KenLM keys its
table by a hash of the words, so two word sequences of equal hash share their
sentences there; here the key is exact.

The n-grams come from the filter's kernel (its ``collect`` mode: every n-gram of the
model, context already cut, in order), and the decisions go back to it as arrays
(its ``decided`` mode writes each line to the outputs named for it)."""
from array import array

_SPACE = b" \t\n\v\f\r"


def read_phrases(data):
    """(word tuple -> [substring, left, right, phrase] sets of sentences, the number of
    sentences) of the vocabulary's bytes: within a line a space joins words, a tab or
    \\v ends a phrase, any other white space ends the sentence (a sentence without
    words takes no number)."""
    table, sentence, content = {}, 0, False
    for piece in _phrase_tokens(data):
        if piece is None:
            if content:
                sentence += 1
                content = False
            continue
        content = True
        _add_phrase(table, sentence, piece)
    return table, sentence + content


def _phrase_tokens(data):
    """Phrases (word tuples) and None for each sentence end."""
    phrase, word = [], bytearray()
    for c in data + b"\n":
        if c not in _SPACE:
            word.append(c)
            continue
        if word:
            phrase.append(bytes(word))
            word.clear()
        if c == 32:
            continue
        if phrase:
            yield tuple(phrase)
            phrase = []
        if c not in (9, 11):
            yield None


def _add_phrase(table, sentence, p):
    for start in range(len(p)):
        for finish in range(start, len(p)):
            rel = table.setdefault(p[start:finish + 1], (set(), set(), set(), set()))
            rel[0].add(sentence)
            if start == 0:
                rel[1].add(sentence)
        rel[2].add(sentence)
        if start == 0:
            rel[3].add(sentence)


def phrase_sentences(table, ngram):
    """The sentences whose phrases assemble ``ngram`` (bytes, words split at spaces),
    or None when it has no words to test (a leading tag is dropped and the words end
    at </s>)."""
    words = [w for w in ngram.split(b" ") if w]
    if words and words[0][:1] == b"<" and words[0][-1:] == b">":
        words = words[1:]
    if b"</s>" in words:
        words = words[:words.index(b"</s>")]
    if not words:
        return None
    k = len(words)
    reach = [set() for _ in range(k)]
    for j in range(k):          # phrases that end inside the n-gram, begun before it
        rel = table.get(tuple(words[:j + 1]))
        if rel is None:
            break
        reach[j] |= rel[0] if j == k - 1 else rel[2]
    for i in range(1, k):       # phrases begun at word i
        for j in range(i, k):
            rel = table.get(tuple(words[i:j + 1]))
            if rel is None:
                break
            reach[j] |= reach[i - 1] & (rel[1] if j == k - 1 else rel[3])
    return reach[k - 1]


def decisions(table, ngrams, sentences, multiple):
    """For each n-gram of ``ngrams`` (bytes, one a line): the outputs its line goes to,
    as the kernel's arrays (at, outputs): line i goes to outputs[at[i]:at[i + 1]].
    Union has one output; multiple one per sentence, all of them for an n-gram with
    no words to test."""
    at, outs = array("I", [0]), array("I")
    everyone = range(sentences)
    for ngram in ngrams.split(b"\n")[:-1]:
        found = phrase_sentences(table, ngram)
        if multiple:
            outs.extend(everyone if found is None else sorted(found))
        elif found is None or found:
            outs.append(0)
        at.append(len(outs))
    return at, outs
