"""debug-training-logs: find the root cause of a failed distributed training job from every rank's logs.

Layers (data flows one way): ``logs`` (files, decompression, rank of a line, fast scanning) -> ``formats`` (one parser
per source format, pure functions over lines) -> ``analysis`` (what the tools compute) -> ``tools`` (one module per
MCP tool: request/result models and a thin function) -> ``server`` (MCP) and ``cli``. ``verify`` reads analysis
results and files. Nothing below ``tools`` imports ``mcp``.
"""

__version__ = "0.1.0"
