"""How long a cited log line may be: :func:`cut` shortens evidence text to ``TEXT_CUT`` characters.

Kept apart from :mod:`debug_training_logs.models` (which imports pydantic): the scan cuts the lines it keeps too, and
its worker processes never need pydantic.
"""

TEXT_CUT = 300
"""Evidence text is cut to this many characters (the verifier allows for the cut when it checks a citation)."""


def cut(text: str, limit: int = TEXT_CUT) -> str:
    """Cut a line for citation; the verifier accepts a cited text that is a prefix of the real line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
