"""Build of the optional C extension (everything else is declared in pyproject.toml).

``debug_training_logs.logs._linescan`` is the scan's one-pass literal prefilter. It is optional: without a C compiler
the install still succeeds and the scan uses its pure-Python/``ahocorasick_rs`` path, with identical results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "debug_training_logs.logs._linescan",
            sources=["debug_training_logs/logs/_linescan.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
