"""One module per MCP tool: its request parameters, its pydantic result model and a thin function over ``analysis``.

The registry (:mod:`debug_training_logs.tools.registry`) collects each module's ``SPEC``; the MCP server and the CLI
are two front ends over it.
"""
