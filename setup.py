"""Build the Cython kernels.

Every ``nplm/**/*.pyx`` becomes an extension module (``nplm/backoff/_kn.pyx`` is
``nplm.backoff._kn``); C headers live in ``nplm/src``.  ``NPLM_ONLY=_kn,_query``
limits a development build (``python setup.py build_ext --inplace``) to the named
modules, so that one kernel can be rebuilt while another is being edited.
``NPLM_DEBUG=1`` turns bounds checking on.
"""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": bool(os.environ.get("NPLM_DEBUG")),
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
    "embedsignature": True,
    "embedsignature.format": "python",     # signatures in docstrings, for the .pyi stubs
}


def extensions():
    only = {name for name in os.environ.get("NPLM_ONLY", "").split(",") if name}
    exts = []
    for pyx in sorted(glob.glob(os.path.join("nplm", "**", "*.pyx"), recursive=True)):
        module = os.path.splitext(pyx)[0].replace(os.sep, ".")
        if only and module.rsplit(".", 1)[1] not in only:
            continue
        exts.append(Extension(
            module, [pyx],
            include_dirs=[numpy.get_include(), os.path.join("nplm", "src")],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=["-O3", "-fopenmp"],
            extra_link_args=["-fopenmp"],
        ))
    return cythonize(exts, compiler_directives=DIRECTIVES, nthreads=2)


setup(ext_modules=extensions())
