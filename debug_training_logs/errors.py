"""The one exception type for input a user can fix.

Raised anywhere below ``tools``; the MCP server turns it into a ``ToolError`` (the model reads the message) and the CLI
prints it to stderr and exits with status 2. The message must say what is wrong and what to do, in one or two
sentences, and must never contain a secret (an AIS token).
"""


class UserInputError(Exception):
    """Bad input the caller can fix: a missing directory, an invalid regex, a path outside the allowed roots."""
