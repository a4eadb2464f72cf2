"""Training on real text: quality against a unigram model, determinism, resume, bad input
and the ``nplm train`` command."""
import math
from collections import Counter

import numpy as np
import pytest

from nplm.cli.main import main
from nplm.errors import FormatError
from nplm.neural.network import NeuralConfig, NeuralNet
from nplm.neural.train import TrainConfig, train

from helpers import SHARED

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (PTB data) is absent")
PTB5K = SHARED / "reference" / "ptb5k.txt"
TINY = SHARED / "reference" / "tiny200.txt"


def _split(tmp_path, src, n_valid):
    lines = src.read_text().splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:-n_valid]) + "\n")
    (tmp_path / "valid.txt").write_text("\n".join(lines[-n_valid:]) + "\n")
    return tmp_path / "train.txt", tmp_path / "valid.txt"


def unigram_perplexity(train_path, valid_path, vocab):
    """Add-one unigram over the model's predictable words (everything but <s>, <null>)."""
    counts = Counter()
    for line in open(train_path):
        counts.update(w if w in vocab.index else "<unk>" for w in line.split())
        counts["</s>"] += 1
    V = len(vocab) - 2
    total = sum(counts.values())
    nll, n = 0.0, 0
    for line in open(valid_path):
        for w in line.split() + ["</s>"]:
            w = w if w in vocab.index else "<unk>"
            nll -= math.log((counts[w] + 1) / (total + V))
            n += 1
    return math.exp(nll / n)


@needs_shared
@pytest.mark.parametrize("output,objective", [("class", "mle"), ("softmax", "nce")])
def test_small_model_beats_unigram(tmp_path, output, objective):
    tr, va = _split(tmp_path, PTB5K, 500)
    cfg = NeuralConfig(order=4, embedding_dim=32, hidden=(64,), output=output, objective=objective,
                       noise_samples=20, clustering="frequency")
    # one thread: deterministic (two Hogwild threads on a loaded machine once gave 521
    # against the bound of 519, where an idle one gives 460-470)
    tc = TrainConfig(epochs=2, minibatch=128, learning_rate=0.1, dropout=0.0, threads=1)
    net = train(tr, va, tmp_path / "m.nplm", cfg, tc, log=lambda s: None, progress=False)
    from nplm.neural.train import Corpus
    corpus = Corpus(tr, va, 4, vocab=net.vocab)
    ppl = net.perplexity(*corpus.valid)
    uni = unigram_perplexity(tr, va, net.vocab)
    assert ppl < 0.75 * uni, (ppl, uni)
    # the saved model scores the same
    back = NeuralNet.load(tmp_path / "m.nplm")
    assert back.perplexity(*corpus.valid) == pytest.approx(ppl, rel=1e-6)


@needs_shared
@pytest.mark.parametrize("output,objective", [("class", "mle"), ("softmax", "nce")])
def test_tied_embeddings_train_and_save_one_table(tmp_path, output, objective):
    import nplm
    tr, va = _split(tmp_path, PTB5K, 500)
    cfg = NeuralConfig(order=4, embedding_dim=24, hidden=(48, 24), context="full", output=output,
                       objective=objective, noise_samples=20, clustering="frequency", tie_embeddings=True)
    # one thread: a deterministic run, so the quality bound cannot flake
    tc = TrainConfig(epochs=3, minibatch=128, learning_rate=0.1, dropout=0.0, threads=1)
    net = train(tr, va, tmp_path / "t.nplm", cfg, tc, log=lambda s: None, progress=False)
    from nplm.neural.train import Corpus
    corpus = Corpus(tr, va, 4, vocab=net.vocab)
    ppl = net.perplexity(*corpus.valid)
    assert ppl < 0.75 * unigram_perplexity(tr, va, net.vocab)
    back = NeuralNet.load(tmp_path / "t.nplm")
    assert back.config.tie_embeddings
    # the input table is the output table in word-id order
    np.testing.assert_array_equal(back.params["emb"], back.params["out_w"][back.structs["word_pos"]])
    # and the query side scores it like the trainer did
    m = nplm.Model(str(tmp_path / "t.nplm"), normalization="exact" if output == "softmax" else None)
    lines = va.read_text().splitlines()
    total = sum(m.score(l) for l in lines)
    n = sum(len(l.split()) + 1 for l in lines)
    assert 10 ** (-total / n) == pytest.approx(ppl, rel=1e-4)


@pytest.mark.parametrize("cfg,msg", [
    (dict(output="tree", hidden=(8,), embedding_dim=8), "tree"),
    (dict(output="class", hidden=(16,), embedding_dim=8), "as wide as the embeddings")])
def test_tied_embeddings_refuse_impossible_shapes(cfg, msg):
    with pytest.raises(ValueError, match=msg):
        NeuralConfig(tie_embeddings=True, objective="mle", **cfg).validate()


@needs_shared
def test_same_seed_one_thread_same_bytes(tmp_path):
    tr, va = _split(tmp_path, TINY, 20)
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(12, 6), output="softmax", objective="nce",
                       noise_samples=5, variable_history=True)
    tc = TrainConfig(epochs=2, minibatch=16, threads=1, seed=5, dropout=0.2)
    quiet = dict(log=lambda s: None, progress=False)
    train(tr, va, tmp_path / "a.nplm", cfg, tc, **quiet)
    train(tr, va, tmp_path / "b.nplm", cfg, tc, **quiet)
    a, b = (tmp_path / "a.nplm").read_bytes(), (tmp_path / "b.nplm").read_bytes()
    assert a == b
    tc.seed = 6
    train(tr, va, tmp_path / "c.nplm", cfg, tc, **quiet)
    assert (tmp_path / "c.nplm").read_bytes() != a


@needs_shared
@pytest.mark.parametrize("output", ["class", "tree"])
def test_resume_continues_exactly(tmp_path, output):
    tr, va = _split(tmp_path, TINY, 20)
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(10,), output=output, objective="mle",
                       clustering="frequency", classes=5)
    quiet = dict(log=lambda s: None, progress=False)
    tc = TrainConfig(epochs=3, minibatch=16, threads=1, max_halvings=10)
    train(tr, va, tmp_path / "full.nplm", cfg, tc, **quiet)
    tc1 = TrainConfig(epochs=1, minibatch=16, threads=1, max_halvings=10)
    train(tr, va, tmp_path / "part.nplm", cfg, tc1, **quiet)
    assert (tmp_path / "part.nplm.ckpt").exists()
    train(tr, va, tmp_path / "part.nplm", cfg, tc, resume=True, **quiet)
    full = NeuralNet.load(tmp_path / "full.nplm")
    part = NeuralNet.load(tmp_path / "part.nplm")
    for n in full.params:
        np.testing.assert_array_equal(full.params[n], part.params[n])


@needs_shared
def test_weight_average_is_the_running_mean_of_the_iterates(tmp_path):
    from nplm.neural.train import Corpus, Trainer

    class Recording(Trainer):
        EMA_EVERY = 1

        def _ema_step(self, alpha):
            self.seen.append(([p.copy() for p in self.params], alpha))
            super()._ema_step(alpha)

    tr, va = _split(tmp_path, TINY, 20)
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(10,), output="softmax", objective="mle")
    tc = TrainConfig(epochs=2, minibatch=16, threads=1, average=0.5)
    corpus = Corpus(tr, va, 3)
    net = NeuralNet.create(cfg, corpus.vocab, seed=1)
    t = Recording(net, corpus, tc, log=lambda s: None, progress=False)
    t.seen = []
    start = [p.copy() for p in t.params]
    t.run_epoch()
    n_batches = -(-corpus.train[1].size // 16)
    assert len(t.seen) == n_batches
    alpha = t.seen[0][1]
    assert alpha == pytest.approx(16 / (0.5 * corpus.train[1].size))
    ref = [p.astype(np.float64) for p in start]
    for params, _ in t.seen:
        ref = [e + alpha * (p - e) for e, p in zip(ref, params)]
    for e, r, _raw in zip(t.ema, ref, t.params):
        np.testing.assert_allclose(e, r, rtol=1e-4, atol=1e-6)
    assert any(not np.allclose(e, raw) for e, raw in zip(t.ema, t.params))
    # validation and the returned model use the average
    ppl_avg, ppl_raw = t.valid_ppl(t.ema), t.valid_ppl(t.params)
    assert ppl_avg != ppl_raw
    final = t.train()
    assert t.history[0]["valid_ppl"] == pytest.approx(t.valid_ppl(t.ema))
    assert final.perplexity(*corpus.valid) == pytest.approx(t.best, rel=1e-6)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bad_corpora(tmp_path):
    good = _write(tmp_path, "good.txt", "the cat sat\nthe dog sat\n" * 5)
    cfg = NeuralConfig(order=3, embedding_dim=4, hidden=(4,), output="softmax", objective="mle")
    tc = TrainConfig(epochs=1, threads=1)
    quiet = dict(log=lambda s: None, progress=False)
    with pytest.raises(FormatError, match="empty.txt.*no words"):
        train(_write(tmp_path, "empty.txt", "\n\n"), None, tmp_path / "m", cfg, tc, **quiet)
    with pytest.raises(FormatError, match="one.txt.*at least two"):
        train(_write(tmp_path, "one.txt", "hello\n"), None, tmp_path / "m", cfg, tc, **quiet)
    with pytest.raises(FormatError, match="oov.txt.*out of the training vocabulary"):
        train(good, _write(tmp_path, "oov.txt", "zebra quagga\nokapi\n"), tmp_path / "m", cfg, tc, **quiet)
    with pytest.raises(FormatError, match="reserved.txt:2.*<s>"):
        train(_write(tmp_path, "reserved.txt", "a b\n<s> a\n"), None, tmp_path / "m", cfg, tc, **quiet)
    with pytest.raises(OSError, match="missing.txt"):
        train(tmp_path / "missing.txt", None, tmp_path / "m", cfg, tc, **quiet)
    with pytest.raises(FileNotFoundError, match="ckpt"):
        train(good, None, tmp_path / "nothing", cfg, tc, resume=True, **quiet)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("bad,msg", [
    (dict(epochs=0), "epochs"), (dict(minibatch=-5), "minibatch"), (dict(learning_rate=-1.0), "learning rate"),
    (dict(optimizer="adam"), "optimizer"), (dict(dropout=1.0), "dropout"), (dict(threads=0), "threads"),
    (dict(l2=-0.1), "L2"), (dict(average=-1.0), "averaging")])
def test_bad_training_settings(bad, msg):
    with pytest.raises(ValueError, match=msg):
        TrainConfig(**bad).validate()


@pytest.mark.parametrize("args,msg", [
    (["--order", "1"], "order must be at least 2"),
    (["--embedding-dim", "-4"], "embedding dimension must be positive"),
    (["--hidden", "10,-3"], "hidden layer sizes must be positive"),
    (["--hidden", "ten"], "--hidden takes"),
    (["--objective", "nce", "--noise-samples", "0"], "at least one noise sample"),
    (["--minibatch", "0"], "minibatch"),
])
def test_cli_rejects_nonsense(tmp_path, capsys, args, msg):
    good = _write(tmp_path, "good.txt", "the cat sat\nthe dog sat\n" * 5)
    code = main(["train", "--train", str(good), "--out", str(tmp_path / "m.nplm"), "--quiet"] + args)
    assert code == 1
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "m.nplm").exists()


def test_cli_trains_and_refuses_to_overwrite_input(tmp_path, capsys):
    good = _write(tmp_path, "good.txt", "the cat sat on the mat\nthe dog sat on the log\n" * 20)
    out = tmp_path / "m.nplm"
    code = main(["train", "--train", str(good), "--valid", str(good), "--out", str(out), "--order", "3",
                 "--embedding-dim", "8", "--hidden", "8", "--output", "tree", "--objective", "mle",
                 "--epochs", "2", "--threads", "1"])
    assert code == 0
    err = capsys.readouterr().err
    assert "epoch 2" in err and "valid ppl" in err
    net = NeuralNet.load(out)
    assert net.config.output == "tree" and net.order == 3
    code = main(["train", "--train", str(good), "--out", str(good), "--quiet"])
    assert code == 1 and "overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("flag, want", [([], True), (["--no-variable-history"], False),
                                        (["--variable-history", "--full-history", "0.5"], True)])
def test_variable_history_is_the_default_and_can_be_turned_off(tmp_path, flag, want):
    good = _write(tmp_path, "good.txt", "the cat sat on the mat\nthe dog sat on the log\n" * 20)
    out = tmp_path / "m.nplm"
    code = main(["train", "--train", str(good), "--out", str(out), "--order", "3", "--embedding-dim", "8",
                 "--hidden", "", "--output", "softmax", "--epochs", "1", "--threads", "1", "--quiet", *flag])
    config = NeuralNet.load(out).config
    assert code == 0 and config.variable_history is want
    assert config.full_history == (0.5 if "--full-history" in flag else 0.75)


def test_a_model_file_without_the_variable_history_keys_was_trained_without_truncation_or_uniformly():
    saved = NeuralConfig(order=4).to_json()
    assert saved.pop("variable_history") is True and saved.pop("full_history") == 0.75
    assert NeuralConfig.from_json(saved).variable_history is False
    saved["variable_history"] = True            # the uniform draw over 1..3 words
    assert NeuralConfig.from_json(saved).full_history == pytest.approx(1 / 3)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "half"])
def test_full_history_share_is_checked(bad):
    with pytest.raises(ValueError, match="full history share must be a number from 0 to 1"):
        NeuralConfig(full_history=bad).validate()


def test_waiting_for_a_lagging_worker_redraws_about_once_a_second(tmp_path, monkeypatch):
    """Worker 0 ends long before worker 1 (its steps slowed down: the one stand-in here,
    for timing only); the main thread must wait, not redraw the bar in a spin."""
    import time

    import tqdm

    from nplm.neural.train import Corpus, Trainer
    good = _write(tmp_path, "good.txt", "the cat sat on the mat\nthe dog sat on the log\n" * 20)
    cfg = NeuralConfig(order=3, embedding_dim=4, hidden=(4,), output="softmax", objective="mle")
    tc = TrainConfig(epochs=1, minibatch=4, threads=2, average=0)
    corpus = Corpus(good, None, 3)
    t = Trainer(NeuralNet.create(cfg, corpus.vocab, seed=1), corpus, tc, log=lambda s: None, progress=True)
    assert len(t.engines) == 2

    class Slow:
        def __init__(self, eng):
            self.eng = eng

        def step(self, *a):
            time.sleep(0.05)
            return self.eng.step(*a)

        def __getattr__(self, name):
            return getattr(self.eng, name)

    t.engines[1] = Slow(t.engines[1])
    redraws = []
    real = tqdm.tqdm.set_postfix
    monkeypatch.setattr(tqdm.tqdm, "set_postfix", lambda self, *a, **k: (redraws.append(1), real(self, *a, **k)))
    t0 = time.monotonic()
    t.run_epoch()
    elapsed = time.monotonic() - t0
    n_slow = len(range(4, corpus.train[1].size, 8))
    assert elapsed >= 0.05 * n_slow > 1.5          # worker 1 really lagged
    # at most one redraw per second of waiting, plus the final one
    assert len(redraws) <= elapsed + 2, (len(redraws), elapsed)


def test_log_without_validation_text_has_no_validation_figure(tmp_path):
    good = _write(tmp_path, "good.txt", "the cat sat on the mat\nthe dog sat on the log\n" * 20)
    cfg = NeuralConfig(order=3, embedding_dim=4, hidden=(4,), output="softmax", objective="mle")
    tc = TrainConfig(epochs=2, threads=1)
    lines = []
    train(good, None, tmp_path / "m.nplm", cfg, tc, log=lines.append, progress=False)
    epochs = [l for l in lines if l.startswith("epoch ")]
    assert len(epochs) == 2 and not any("valid" in l or "nan" in l for l in epochs), epochs
    lines = []
    train(good, good, tmp_path / "v.nplm", cfg, tc, log=lines.append, progress=False)
    assert all("valid ppl" in l for l in lines if l.startswith("epoch "))


def _resume_setup(tmp_path):
    text = "the cat sat on the mat\nthe dog sat on the log\na cat and a dog\n"
    tr = _write(tmp_path, "train.txt", text * 10)
    va = _write(tmp_path, "valid.txt", text)
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(6,), output="class", objective="mle",
                       clustering="frequency", classes=3)
    tc = TrainConfig(epochs=1, minibatch=8, threads=1, dropout=0.1)
    train(tr, va, tmp_path / "m.nplm", cfg, tc, log=lambda s: None, progress=False)
    return tr, va, cfg, tc


def test_resume_refuses_other_settings_or_data(tmp_path):
    import dataclasses
    tr, va, cfg, tc = _resume_setup(tmp_path)
    ckpt, out = tmp_path / "m.nplm.ckpt", tmp_path / "m.nplm"
    before = ckpt.read_bytes(), out.read_bytes()
    quiet = dict(log=lambda s: None, progress=False)
    more = dataclasses.replace(tc, epochs=3)

    def refused(train_path, valid_path, c, t, *expect):
        with pytest.raises(ValueError, match="cannot resume") as e:
            train(train_path, valid_path, out, c, t, resume=True, **quiet)
        for flag in expect:
            assert flag in str(e.value), (flag, str(e.value))
        assert (ckpt.read_bytes(), out.read_bytes()) == before
        return str(e.value)

    msg = refused(tr, va, dataclasses.replace(cfg, embedding_dim=64, output="softmax"), more,
                  "--embedding-dim: 8 in the checkpoint, 64 now", "--output: class in the checkpoint, softmax now")
    listed = [l.split(":")[0].strip() for l in msg.splitlines() if l.startswith("  --")]
    assert listed == ["--embedding-dim", "--output"], msg     # --epochs may change
    refused(tr, va, dataclasses.replace(cfg, hidden=(6, 4)), more, "--hidden: 6 in the checkpoint, 6,4 now")
    refused(tr, va, cfg, dataclasses.replace(more, dropout=0.3, learning_rate=0.1), "--dropout", "--learning-rate")
    # another training text (same name, other content), or a changed or missing validation text
    other = tmp_path / "other"
    other.mkdir()
    tr2 = _write(other, "train.txt", tr.read_text()[:-20] + "\n")
    refused(tr2, va, cfg, more, "--train", str(tr2), str(tr))
    refused(tr, None, cfg, more, f"--valid: {va} (", "in the checkpoint, none now")
    refused(tr, tr, cfg, more, "--valid")
    # the command line says the same
    code = main(["train", "--train", str(tr), "--valid", str(va), "--out", str(out), "--order", "3",
                 "--embedding-dim", "64", "--hidden", "6", "--output", "softmax", "--objective", "mle",
                 "--epochs", "3", "--threads", "1", "--resume", "--quiet"])
    assert code == 1 and (ckpt.read_bytes(), out.read_bytes()) == before


def test_resume_with_the_same_settings_and_data(tmp_path, capsys):
    import dataclasses
    tr, va, cfg, tc = _resume_setup(tmp_path)
    out = tmp_path / "m.nplm"
    # a copy of the data elsewhere is the same data; when to stop and threads may change
    moved = tmp_path / "moved"
    moved.mkdir()
    tr2 = _write(moved, "t.txt", tr.read_text())
    more = dataclasses.replace(tc, epochs=2, threads=2, max_halvings=9, time_limit=600.0)
    train(tr2, va, out, cfg, more, resume=True, log=lambda s: None, progress=False)
    assert [h["epoch"] for h in NeuralNet.load(out, return_container=True)[1].config["training"]["history"]] \
        == [1, 2]
    # the API without settings takes the checkpoint's
    train(tr, va, out, None, None, resume=True, log=lambda s: None, progress=False)
    # so does the command line given the same options
    code = main(["train", "--train", str(tr), "--valid", str(va), "--out", str(out), "--order", "3",
                 "--embedding-dim", "8", "--hidden", "6", "--output", "class", "--objective", "mle",
                 "--clustering", "frequency", "--classes", "3", "--minibatch", "8", "--dropout", "0.1",
                 "--epochs", "3", "--threads", "1", "--resume"])
    assert code == 0
    assert "resuming after epoch 2" in capsys.readouterr().err


def test_resume_from_a_checkpoint_without_data_record_is_lenient(tmp_path):
    """Checkpoints written before the data fingerprint: resume goes on, with a note."""
    from nplm.io import container
    tr, va, cfg, tc = _resume_setup(tmp_path)
    ckpt = tmp_path / "m.nplm.ckpt"
    c = container.read(ckpt)
    assert "data" in c.config["checkpoint"]
    net, _ = NeuralNet.load(ckpt, return_container=True)
    state = {k: v for k, v in c.config["checkpoint"].items() if k != "data"}
    extra = {k: np.array(v) for k, v in c.arrays.items() if k.split(".")[0] in ("opt", "best", "ema")}
    net.save(ckpt, extra_config={"checkpoint": state}, extra_arrays=extra)
    lines = []
    other = _write(tmp_path, "other.txt", "the cat sat on the log\n" * 10)
    import dataclasses
    train(other, va, tmp_path / "m.nplm", cfg, dataclasses.replace(tc, epochs=2), resume=True,
          log=lines.append, progress=False)
    assert any("does not record its training data" in l for l in lines), lines


def test_resume_from_the_command_line_keeps_the_checkpoints_settings(tmp_path, capsys):
    """Options not given on resume are the checkpoint's (not the defaults, which differ
    from it in nearly every field here); a given one that differs is still refused."""
    tr, va, cfg, tc = _resume_setup(tmp_path)
    out, ckpt = tmp_path / "m.nplm", tmp_path / "m.nplm.ckpt"
    base = ["train", "--train", str(tr), "--valid", str(va), "--out", str(out), "--threads", "1",
            "--resume", "--quiet"]
    before = ckpt.read_bytes(), out.read_bytes()
    assert main(base + ["--epochs", "3", "--dropout", "0.4"]) == 1      # the default, given
    assert "--dropout: 0.1 in the checkpoint, 0.4 now" in capsys.readouterr().err
    assert (ckpt.read_bytes(), out.read_bytes()) == before
    assert main([w for w in base if w != "--quiet"] + ["--epochs", "2"]) == 0
    assert "resuming after epoch 1" in capsys.readouterr().err
    net, cont = NeuralNet.load(out, return_container=True)
    assert net.config == cfg
    assert [h["epoch"] for h in cont.config["training"]["history"]] == [1, 2]
    assert cont.config["training"]["train_config"]["dropout"] == tc.dropout


def test_training_keeps_only_the_copies_of_the_weights_it_needs(tmp_path):
    """At the end of an epoch the live memory is the weights the trainer needs: the
    weights, AdaGrad's state, the average, the best epoch's and one engine's gradients
    (5 copies), plus small change.  The initial weights (kept by the trainer's net)
    and a full-size temporary of the average's update were two more: 33k-word
    WikiText-2 at 1000-d took 2.3 GB for a 236 MB model."""
    import tracemalloc

    from nplm.neural.train import Corpus, Trainer
    # a large vocabulary and few tokens, so the weights dominate the memory
    words = [f"w{i}" for i in range(12000)]
    text = _write(tmp_path, "t.txt", "\n".join(" ".join(words[i:i + 40]) for i in range(0, len(words), 40)) + "\n")
    cfg = NeuralConfig(order=3, embedding_dim=64, output="softmax", objective="nce")
    tc = TrainConfig(epochs=1, minibatch=8, threads=1, average=0.25)
    corpus = Corpus(text, text, 3)
    tracemalloc.start()
    try:
        net = NeuralNet.create(cfg, corpus.vocab, seed=1)
        size = sum(p.nbytes for p in net.params.values())
        t = Trainer(net, corpus, tc, log=lambda s: None, progress=False)
        del net
        t.run_epoch()
        t.best_params = [p.copy() for p in t.evaluated()]
        live = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert live < 5.5 * size, (live / size)


@needs_shared
def test_validation_uses_the_threads_asked_for(tmp_path, monkeypatch):
    """--threads 1 means one thread for validation too (it split the rows over two)."""
    import nplm.neural.network as neural
    tr, va = _split(tmp_path, PTB5K, 300)
    seen, real = [], neural._run_split
    monkeypatch.setattr(neural, "_run_split", lambda fn, n, threads: (seen.append((n, threads)), real(fn, n, threads)))
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(), context="diagonal", output="class", objective="nce")
    for threads in (1, 2):
        seen.clear()
        train(tr, va, tmp_path / f"t{threads}.nplm", cfg, TrainConfig(epochs=1, threads=threads, seed=1),
              log=lambda s: None, progress=False)
        assert seen and all(t == threads for n, t in seen) and max(n for n, t in seen) >= 2048, seen
