"""Whether the SQLite file a writer holds open is still the file at its path.

SQLite keeps writing to a file that was deleted, renamed or replaced while it was open: its
appends and commits succeed, into a file no one can open again. A writable store remembers
its file's device and inode when it opens it and compares them with the path's after every
commit (one ``os.stat``, about a microsecond): the first commit after the file went raises
:class:`~statemachine.exceptions.LogFileLostError`. A file moved away and back is the same
file again.
"""

from __future__ import annotations

import os
from pathlib import Path

from statemachine.exceptions import LogFileLostError


class FileWatch:
    """The identity of the SQLite file at ``path`` as it is now, checked against the path later.

    Args:
        path: the database file (it exists: the store just opened or created it).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(os.path.abspath(path))
        self._where = str(self.path)  # os.stat of a str: no conversion per commit
        found = os.stat(self._where)
        self._identity = (found.st_dev, found.st_ino)

    def problem(self) -> str | None:
        """What happened to the file (``None``: it is still at its path)."""
        try:
            found = os.stat(self._where)
        except FileNotFoundError:
            return "was deleted or moved away"
        except OSError:
            return None  # cannot tell (a folder made unreadable): the writes themselves say
        if (found.st_dev, found.st_ino) != self._identity:
            return "was replaced by another file"
        return None

    def error(self, problem: str) -> LogFileLostError:
        """The error for :meth:`problem`'s answer."""
        return LogFileLostError(
            f"the event log file {self.path} {problem} while this process had it open: the "
            "last write went to the file it still holds, which is no longer there, as would "
            "every later one"
        )
