"""The kimi-ops exception tree.

::

    KimiOpsError                 every error the tool raises on purpose
    ├── ProfileError             a profile key has a bad value (names the key)
    ├── ConfigPatchError         a model config file is missing or is not a JSON object
    └── StepFailed               a step of a task failed on the host (step, command, stderr, hint)
        └── RemoteKilled         the remote shell was killed by a signal (exit status -1)

Catch ``KimiOpsError`` to handle everything the tool reports; the ``fab`` entry point prints its
one-line message and exits non-zero without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations


class KimiOpsError(Exception):
    """Base class of every error kimi-ops raises on purpose."""

    hint: str = ""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ProfileError(KimiOpsError, ValueError):
    """A profile value is invalid. ``key`` names it (dotted, e.g. ``standin.gpu_count``)."""

    def __init__(self, key: str, problem: str, *, hint: str = "") -> None:
        super().__init__(f"profile key kimi.{key}: {problem}", hint=hint)
        self.key = key
        self.problem = problem


class ConfigPatchError(KimiOpsError, ValueError):
    """A model config file cannot be patched (missing, malformed JSON, not an object)."""

    def __init__(self, path: str, problem: str, *, hint: str = "") -> None:
        super().__init__(f"{path}: {problem}", hint=hint)
        self.path = path


class StepFailed(KimiOpsError):
    """A step failed on the host.

    Carries what a user needs to act: the step, the command that was run, its exit status and
    stderr, and a hint.
    """

    def __init__(
        self,
        step: str,
        message: str,
        *,
        command: str = "",
        exited: int | None = None,
        stderr: str = "",
        hint: str = "",
    ) -> None:
        super().__init__(f"{step}: {message}", hint=hint)
        self.step = step
        self.reason = message
        self.command = command
        self.exited = exited
        self.stderr = stderr


class RemoteKilled(StepFailed):
    """The remote shell died from a signal: Fabric reports ``exited == -1``.

    The classic cause is a ``pkill -f`` whose pattern matched the shell running it.
    """
