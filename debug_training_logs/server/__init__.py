"""The MCP front end: an ``MCPServer`` built from the tool registry, its transports and the allowed-roots policy."""
