"""The agent CLI's exceptions; only ``cli.main`` turns them into exit codes."""


class AgentError(Exception):
    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(AgentError):
    """Bad command line or settings (exit 2), or a command that cannot start (126/127)."""
