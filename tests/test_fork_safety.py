"""Models keep working in processes forked after they scored in parallel.

GNU OpenMP keeps the thread team of the thread that ran a parallel region and
does not survive fork: a child's first parallel region waited for threads that
exist only in the parent.  A process pool (multiprocessing's default start method
on Linux) forked after a batch call hung in its first batch call.  Each test forks
a pool after the parent scored with two threads and waits with a timeout, so that
a hang fails the test instead of stalling the run.
"""
import multiprocessing as mp
import os

import numpy as np
import pytest

import nplm

from helpers import linear_spec, make_net, quiet_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY_ARPA = os.path.join(ROOT, "examples", "toy.arpa")
SENTENCES = ["the dog saw a cat", "w1 w2 w3 w4 w5 w6", "a cat", "w7 the w9 dog w3"] * 40
TIMEOUT = 60

_MODEL = None      # the model the pool's children inherit


def _model(kind, tmp_path):
    if kind == "backoff":
        path = str(tmp_path / "toy.nplm")
        nplm.build_binary(TOY_ARPA, path)
    elif kind == "interpolated":
        neural = str(tmp_path / "net.nplm")
        make_net("class-full-1").save(neural)
        path = linear_spec(tmp_path / "mix.json", [TOY_ARPA, neural], [0.5, 0.5])
    else:
        path = str(tmp_path / f"{kind}.nplm")
        make_net(kind).save(path)
    return nplm.Model(path, quiet_config())


def _child_scores(_):
    m = _MODEL
    return (np.asarray(m.score_sentences(SENTENCES, threads=2)),
            np.asarray(m.score_sentences(SENTENCES)),
            np.array([m.score(s) for s in SENTENCES[:8]]))


def _in_forked_pool(n_tasks=4):
    pool = mp.get_context("fork").Pool(2)
    try:
        return pool.map_async(_child_scores, range(n_tasks)).get(timeout=TIMEOUT)
    except mp.TimeoutError:
        pytest.fail(f"a forked child's batch call did not return in {TIMEOUT} s")
    finally:
        pool.terminate()
        pool.join()


@pytest.mark.parametrize("kind", ["softmax-full-2", "class-full-1", "tree-full-1", "backoff",
                                  "interpolated"])
def test_forked_children_score_as_the_parent(kind, tmp_path):
    global _MODEL
    _MODEL = m = _model(kind, tmp_path)
    expect = np.asarray(m.score_sentences(SENTENCES, threads=2))    # a parallel region here
    try:
        results = _in_forked_pool()
    finally:
        _MODEL = None
    single = np.array([m.score(s) for s in SENTENCES[:8]])
    for batch_two, batch_default, one_by_one in results:
        np.testing.assert_allclose(batch_two, expect, rtol=0, atol=1e-4)
        np.testing.assert_allclose(batch_default, expect, rtol=0, atol=1e-4)
        np.testing.assert_allclose(one_by_one, single, rtol=0, atol=1e-4)
    # the parent's own team is untouched by the fork
    np.testing.assert_array_equal(np.asarray(m.score_sentences(SENTENCES, threads=2)), expect)


def test_a_thread_started_in_the_child_scores_too(tmp_path):
    """Only the forking thread's team is stale: a thread the child starts gets its
    own, and scores as the parent did."""
    m = _model("softmax-full-2", tmp_path)
    expect = np.asarray(m.score_sentences(SENTENCES, threads=2))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:        # the child: score from a new thread, report through the pipe
        code = 1
        try:
            import threading
            out = []
            t = threading.Thread(target=lambda: out.append(m.score_sentences(SENTENCES, threads=2)))
            t.start()
            t.join(TIMEOUT)
            if out:
                os.write(w, np.asarray(out[0], np.float64).tobytes())
                code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_allclose(np.frombuffer(data, np.float64), expect, rtol=0, atol=1e-4)
