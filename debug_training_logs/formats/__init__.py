"""One parser per source format: pure functions over lines, never opening files."""
