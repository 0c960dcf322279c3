"""What the tools compute, pure and MCP-free."""
