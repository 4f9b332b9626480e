"""Why the aggregate refuses a decision. Refusals are recorded as events, never raised to callers."""


class DecisionRejected(Exception):
    """A proposed decision breaks an invariant of the agent's memory; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
