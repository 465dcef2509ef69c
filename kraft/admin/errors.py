"""The errors of `kraft.admin`: one type for every failed call, with what a reconciler needs.

`AdminError.retriable` says whether the same call may succeed later unchanged (a leader
election, another voter change in flight, a replica still catching up). `already_done` says
that the goal of the call is met although the call failed: AddRaftVoter answered
DUPLICATE_VOTER and the voter set holds exactly that replica key, or RemoveRaftVoter answered
VOTER_NOT_FOUND and the voter set does not hold it (for example, a retry of a call whose answer
was lost). The client checks the voter set before it sets `already_done`, because both codes
have a second meaning (a voter id present with another directory id; a removal that would
leave no voter).

`AdminConnectionError` is the error of a call that got no answer at all (connection refused,
reset, or timed out). It is always retriable; for a membership change its outcome is unknown,
which a retry resolves (the retry answers `already_done`).
"""

from __future__ import annotations

from kraft.protocol.errors import ErrorCode

RETRIABLE_CODES: frozenset[int] = frozenset({
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.NOT_CONTROLLER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
})
"""Codes after which the same call may succeed unchanged: leadership moving, a leader
shutting down (BROKER_NOT_AVAILABLE), a voter change or a catch-up still pending
(REQUEST_TIMED_OUT)."""


def error_name(code: int) -> str:
    """Kafka's name of an error code (`ERROR_<code>` for one this project does not name)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


class AdminError(Exception):
    """A `kraft.admin` call failed.

    Attributes: `code` (Kafka error code), `name` (Kafka error name), `message` (what failed
    and where), `retriable`, `already_done` (see the module docstring).
    """

    def __init__(self, code: int, message: str, *, retriable: bool | None = None,
                 already_done: bool = False) -> None:
        self.code = int(code)
        self.name = error_name(code)
        self.message = message
        self.retriable = (self.code in RETRIABLE_CODES) if retriable is None else retriable
        self.already_done = already_done
        super().__init__(f"{self.name}: {message}")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code}, name={self.name!r}, "
                f"message={self.message!r}, retriable={self.retriable}, "
                f"already_done={self.already_done})")


class AdminConnectionError(AdminError):
    """No answer: every address refused, reset or timed out. Always retriable.

    `timed_out` tells a timeout (the request may have reached the leader) from a refused or
    broken connection; `addresses` are the HOST:PORT tried.
    """

    def __init__(self, message: str, *, timed_out: bool = False,
                 addresses: tuple[str, ...] = ()) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT if timed_out else ErrorCode.NETWORK_EXCEPTION,
                         message, retriable=True)
        self.timed_out = timed_out
        self.addresses = addresses
