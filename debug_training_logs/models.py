"""Result pieces every tool shares (contract): ``Coverage``, ``Evidence``, ``UnreadableFile``.

Every tool result carries ``coverage`` so that a reader can see at once whether the answer rests on all ranks.
"""

from pydantic import BaseModel, ConfigDict, Field

from debug_training_logs.textcut import TEXT_CUT


class Model(BaseModel):
    """The base of every result model of ours: its validator and serializer are built on its first use, not when its
    module is imported (``defer_build``): a command builds only the models it uses, and the CLI builds them while a
    scan's worker processes read the files (:func:`build_deferred`), not before the scan starts."""

    model_config = ConfigDict(defer_build=True)


def build_deferred() -> None:
    """Build every model of ours imported so far whose build is still deferred (what its first use would do).

    Roughly in the order they were defined: the models a model's fields name come before it (defined or imported
    first), and a built one's schema is reused by the models that hold it, not generated again (25 models of
    ``analyze``: 30 ms instead of 38)."""
    found: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [Model]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        found.append(cls)
    for cls in reversed(found):
        if not cls.__pydantic_complete__ and cls is not Model:
            cls.model_rebuild()


class UnreadableFile(Model):
    """A file that could not be read, or only partly."""

    file: str = Field(description="Path relative to the directory the tool was pointed at.")
    reason: str = Field(description="Why: binary content, truncated compressed stream (how far it got), permission...")


class Coverage(Model):
    """What the answer rests on: how much was read and which ranks it saw against the world size."""

    files_scanned: int = Field(description="Log files read (plain, .gz, .zst, rotated).")
    bytes_scanned: int = Field(description="Bytes read from disk (compressed size for compressed files).")
    ranks_found: str = Field(description="Global ranks seen in the logs, as a range string like '0-36,38-63'.")
    world_size: int | None = Field(description="Number of ranks the job had, or null when no log line says.")
    world_size_evidence: str = Field(
        default="", description="Which line(s) the world size comes from (file:line and the fact), or why unknown."
    )
    missing_ranks: str = Field(
        description="Ranks expected by the world size but absent from every file (range string)."
    )
    unreadable_files: list[UnreadableFile] = Field(default_factory=list)


class Evidence(Model):
    """One cited log line."""

    file: str = Field(description="Path relative to the logs directory given to the tool.")
    line: int = Field(description="1-based line number in the (decompressed) file.")
    text: str = Field(description=f"The line, cut at {TEXT_CUT} characters.")
