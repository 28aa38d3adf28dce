"""The pure domain: statuses, typed failures, events, the retry policy and the state machine
(its named rules, guards and effects, and the table compiled from it that every fold runs).

Nothing here knows about SQL or Ray.
"""
