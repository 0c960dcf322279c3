"""Finding and reading log files: discovery, decompression, rank attribution, streaming lines, fast scanning.

This package is the "searcher": it knows files, bytes and line numbers; it knows nothing about MCP or about what a
line means beyond which rank wrote it.
"""
