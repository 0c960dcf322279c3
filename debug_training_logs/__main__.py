"""``python -m debug_training_logs`` is the same as the ``debug-training-logs`` command."""

from debug_training_logs.entry import program

if __name__ == "__main__":
    program()
