"""What the hub's request-taking services (``gpu-jobs``, ``gpu-kernels``) raise for a
request that may not run: one shape for both, so each handler answers and logs a
refusal the same way."""

from __future__ import annotations


class Refused(Exception):
    """A request that may not run: ``user_message`` for the caller (never anything the
    caller did not send or may not see), ``log_detail`` for the service's log, ``status``
    the HTTP status of the answer."""

    def __init__(self, user_message: str, log_detail: str, status: int = 400):
        super().__init__(user_message)
        self.user_message, self.log_detail, self.status = user_message, log_detail, status
