"""Errors that stop a run on purpose, with a message meant for the user (the CLI prints
it as one line and exits 1). Imports nothing heavy: the CLI catches these by class."""


class RunStopped(RuntimeError):
    """A run stopped for a reason the user can act on; str() is the whole message."""


class TrainingDiverged(RunStopped):
    """The loss was NaN or inf for too many optimizer steps in a row."""


class CheckpointWriteError(RunStopped):
    """A checkpoint could not be written (disk full, permissions); the previous one is intact."""
