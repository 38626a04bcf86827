"""The usage ledger: every server session and training job, with its times, price
and stop reason, in a database of its own (:mod:`.ledger`)."""
