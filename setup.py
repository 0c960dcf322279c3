"""Build of the optional C extension (everything else is declared in pyproject.toml).

``debug_training_logs.logs._linescan`` is the scan's one-pass literal prefilter; ``debug_training_logs.logs._fields``
aggregates runs of progress lines per rank for the evidence sink. Both are optional: without a C compiler the install
still succeeds and the scan uses its pure-Python/``ahocorasick_rs`` path, the sink its per-line path, with identical
results.
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
        Extension(
            "debug_training_logs.logs._fields",
            sources=["debug_training_logs/logs/_fields.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
