"""Build the Cython kernels.

Every ``nplm/**/*.pyx`` becomes an extension module (``nplm/backoff/_kn.pyx`` is
``nplm.backoff._kn``); C headers live in ``nplm/src``.  ``NPLM_ONLY=_kn,_query``
limits a development build (``python setup.py build_ext --inplace``) to the named
modules, so that one kernel can be rebuilt while another is being edited.
``NPLM_DEBUG=1`` turns bounds checking on.
"""
import glob
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class ParallelBuildExt(build_ext):
    """Compile the extension modules on every core (setuptools compiles them one
    after another unless ``--parallel`` is given, and pip gives no way to pass it)."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def build_extension(self, ext):
        """Reuse the module a previous build left in the source tree when it is newer
        than its sources: an editable install builds in a fresh folder each time."""
        target, in_tree = self.get_ext_fullpath(ext.name), self._in_tree_path(ext.name)
        if target != in_tree and os.path.exists(in_tree) and \
                os.path.getmtime(in_tree) >= max(map(os.path.getmtime, ext.sources)):
            self.mkpath(os.path.dirname(target))
            self.copy_file(in_tree, target)
            return
        super().build_extension(ext)

    def _in_tree_path(self, name):
        # as build_ext --inplace places it; computed without toggling self.inplace,
        # which the other compiling threads read
        package = name.rpartition(".")[0]
        package_dir = self.get_finalized_command("build_py").get_package_dir(package)
        return os.path.join(os.path.abspath(package_dir), os.path.basename(self.get_ext_filename(name)))


# OpenMP: GCC's flags; Apple's clang takes them through the preprocessor, with Homebrew's
# libomp (the wheels' build installs it).
if sys.platform == "darwin":
    OPENMP_COMPILE, OPENMP_LINK = ["-Xpreprocessor", "-fopenmp"], ["-lomp"]
else:
    OPENMP_COMPILE, OPENMP_LINK = ["-fopenmp"], ["-fopenmp"]

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": bool(os.environ.get("NPLM_DEBUG")),
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
    "embedsignature": True,
    "embedsignature.format": "python",     # signatures in docstrings, for the .pyi stubs
}


def _generated_c(pyx):
    """The C file Cython wrote for ``pyx`` when it is newer than the ``.pyx`` and every
    header and ``.pxd`` of the package, else None.  Reusing it keeps a second install
    of the same tree (``pip install -e .`` after ``pip install -e .[test]``) from
    translating and compiling everything again: pip's fresh build environment makes
    numpy's own ``.pxd`` files look new to Cython on every install."""
    c_file = os.path.splitext(pyx)[0] + ".c"
    if os.environ.get("NPLM_DEBUG") or not os.path.exists(c_file):
        return None
    local = glob.glob(os.path.join("nplm", "**", "*.pxd"), recursive=True) + \
        glob.glob(os.path.join("nplm", "src", "*.h")) + [pyx, __file__]
    return c_file if os.path.getmtime(c_file) >= max(map(os.path.getmtime, local)) else None


def extensions():
    only = {name for name in os.environ.get("NPLM_ONLY", "").split(",") if name}
    exts = []
    for pyx in sorted(glob.glob(os.path.join("nplm", "**", "*.pyx"), recursive=True)):
        module = os.path.splitext(pyx)[0].replace(os.sep, ".")
        if only and module.rsplit(".", 1)[1] not in only:
            continue
        exts.append(Extension(
            module, [_generated_c(pyx) or pyx],
            include_dirs=[numpy.get_include(), os.path.join("nplm", "src")],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=["-O3", *OPENMP_COMPILE],
            extra_link_args=OPENMP_LINK,
        ))
    return cythonize(exts, compiler_directives=DIRECTIVES, nthreads=os.cpu_count() or 1)


# KenLM's programs under their own names (lmplz, query, ...; docs/guide/kenlm-programs.md)
# are plain scripts, whose "#!python" pip points at the environment's interpreter, not
# console-script entry points: pip's template for those imports re, 6 ms of a start
# that for query over a test set is a fifth of KenLM's whole run.
PROGRAMS = sorted(glob.glob(os.path.join("nplm", "cli", "kenlm", "bin", "*")))

setup(ext_modules=extensions(), scripts=PROGRAMS, cmdclass={"build_ext": ParallelBuildExt})
