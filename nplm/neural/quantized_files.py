"""Quantised copies of neural model files (``nplm convert --to float16|int8``) and
the perplexity check that compares a copy with its source."""
import warnings

from nplm.io import container
from nplm.neural.network import KIND, NeuralNet
from nplm.neural.quantize import quantize_params, same_weights
from nplm.neural.vocab import SPECIALS, examples, read_sentences


def quantize_file(src, dst, dtype, messages=None):
    """Write a quantised copy of the neural model ``src`` (float32 or quantised) to
    ``dst`` (atomically).  ``dtype`` "float32" writes a plain float32 model.

    Fallback normaliser tables (``nplm precompute``) hold softmax normalisers of the
    source's weights; they are kept only where the output's weights are the same
    values (float16/int8 -> float32, float16 -> float16) and otherwise left out, with a
    warning through ``messages(text)`` (default: a Python warning): a stale table would
    make fallback scores silently unnormalised."""
    net, c = NeuralNet.load(src, return_container=True)
    extra_config = {k: v for k, v in c.config.items() if k not in ("format", "net", "specials", "quantized")}
    extra_arrays = {k: v for k, v in c.arrays.items()
                    if not k.startswith(("param.", "qscale.", "vocab.", "struct."))}
    if dtype == "float32":
        net.save(dst, extra_config=extra_config, extra_arrays=extra_arrays)
        return net
    arrays, names = quantize_params(net.params, dtype)
    if any(k.startswith("fallback.") for k in extra_arrays) and not same_weights(net.params, arrays, names):
        extra_arrays = {k: v for k, v in extra_arrays.items() if not k.startswith("fallback.")}
        extra_config.pop("fallback", None)
        note = (f"warning: the fallback normaliser tables (nplm precompute) were computed for {src}'s weights "
                f"and do not match the {dtype} ones, so they are left out of {dst}; for "
                f"normalization='fallback' run `nplm precompute {dst} --text TRAIN` again")
        if messages is not None:
            messages(note)
        else:
            warnings.warn(note, stacklevel=2)
    config = {"format": net.file_format, "net": net.config.to_json(), "specials": list(SPECIALS),
              "quantized": {"dtype": dtype, "params": names}}
    config.update(extra_config)
    arrays.update(net.vocab.to_arrays())
    for n, v in net.structs.items():
        arrays["struct." + n] = v
    arrays.update(extra_arrays)
    container.write(dst, KIND, config, arrays)
    return net


def perplexity_change(reference, quantised, text):
    """(perplexity of ``reference``, of ``quantised``) NeuralNets on a text file, both
    computed exactly (normalised), each over its own vocabulary's ids (a converted
    ISI model may number the words differently)."""
    sents = read_sentences(text)
    return tuple(net.perplexity(*examples(sents, net.vocab, net.order)) for net in (reference, quantised))
