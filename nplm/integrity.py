"""Checking a model file completely (``nplm verify``).

Loading maps a binary without reading its arrays (that is what makes loads
instant), so a flipped bit inside an array is not noticed by ``nplm.Model``.
``verify`` reads everything: every array against its stored crc32, then a full
load, so a damaged file is reported instead of answering wrongly.
"""
from .formats import container


def verify(path):
    """Raise FormatError / ModelLoadError / OSError naming ``path`` when the model
    file is damaged; return a one-line description when it is sound."""
    from .model import ARPALoadComplain, Config, LoadMethod, Model
    if container.is_container(path):
        c = container.read(path)
        c.verify()
        checked = sum(1 for s in c._specs.values() if s.get("crc32") is not None)
        what = f"nplm {c.kind} binary, {checked} of {len(c._specs)} arrays checksummed"
        del c
    else:
        what = "text model (ARPA or interpolation spec)"
    config = Config()
    config.load_method = LoadMethod.LAZY
    config.show_progress = False
    config.arpa_complain = ARPALoadComplain.NONE
    model = Model(path, config)
    return f"{what}, order {model.order}, {len(model.vocab)} words: OK"
