"""The pure domain: statuses, typed failures, events, the retry policy and the state machine.

Nothing here knows about SQL or Ray.
"""
